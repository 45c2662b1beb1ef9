use clap::Parser;
use std::process::ExitCode;

// Many small allocations per row (strings, JSON values, token vectors): see Cargo.toml.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    chatshards::tune_allocator();
    let cli = chatshards::cli::Cli::parse();
    match chatshards::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A closed stdout (`| head`) is not an error.
            if error
                .chain()
                .filter_map(|e| e.downcast_ref::<std::io::Error>())
                .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            chatshards::printer::Printer::Default.error(&format!("error: {error}"));
            for cause in error.chain().skip(1) {
                chatshards::printer::Printer::Default.error(&format!("  caused by: {cause}"));
            }
            ExitCode::FAILURE
        }
    }
}
