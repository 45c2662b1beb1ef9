//! One handler per subcommand.

pub mod build;
pub mod fetch;
pub mod inspect;
pub mod lock;
pub mod normalize;
pub mod render;
pub mod report;
pub mod stats;
pub mod vocab;
