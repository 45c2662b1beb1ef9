//! One handler per subcommand.

pub mod build;
pub mod check;
pub mod diff;
pub mod export;
pub mod fetch;
pub mod inspect;
pub mod lock;
pub mod normalize;
pub mod part;
pub mod render;
pub mod report;
pub mod serve;
pub mod stats;
pub mod verify;
pub mod vocab;
