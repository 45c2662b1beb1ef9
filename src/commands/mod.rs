//! One handler per subcommand.

pub mod build;
pub mod inspect;
pub mod render;
