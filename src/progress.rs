//! The build progress bar (the only place that knows about indicatif).

use crate::pipeline::Progress;
use crate::printer::Printer;
use crate::report::SourceStats;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::Mutex;
use std::time::Instant;

pub struct BuildProgress {
    bar: ProgressBar,
    printer: Printer,
    state: Mutex<State>,
}

struct State {
    started: Instant,
}

impl BuildProgress {
    pub fn new(printer: &Printer) -> Self {
        let target = if printer.progress_enabled() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        BuildProgress {
            bar,
            printer: *printer,
            state: Mutex::new(State {
                started: Instant::now(),
            }),
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for BuildProgress {
    fn source_started(&self, name: &str, take: Option<u64>) {
        let template = match take {
            // With a `take`, kept rows against the target give a real ETA.
            Some(_) => "{prefix:>16} [{bar:30}] {pos}/{len} kept  {msg}  eta {eta}",
            None => "{prefix:>16} {spinner} {pos} rows read  {msg}  {elapsed}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_prefix(name.to_owned());
        self.bar.set_length(take.unwrap_or(0));
        self.bar.set_position(0);
        self.bar.reset_eta();
        if let Ok(mut s) = self.state.lock() {
            s.started = Instant::now();
        }
    }

    fn rows_done(&self, read: u64, kept: u64, tokens: u64) {
        let elapsed = self
            .state
            .lock()
            .map(|s| s.started.elapsed().as_secs_f64())
            .unwrap_or(1.0)
            .max(1e-3);
        let pos = if self.bar.length().unwrap_or(0) > 0 {
            kept
        } else {
            read
        };
        self.bar.set_position(pos);
        self.bar.set_message(format!(
            "{:.0} rows/s  {:.2} M tok/s",
            read as f64 / elapsed,
            tokens as f64 / elapsed / 1e6
        ));
    }

    fn source_finished(&self, name: &str, stats: &SourceStats) {
        self.bar.suspend(|| {
            self.printer.info(&format!(
                "{name}: read {}, kept {}, rejected {}, filtered {}, deduplicated {}",
                stats.read,
                stats.kept,
                stats.rejected_total(),
                stats.filtered_total(),
                stats.deduplicated
            ))
        });
    }
}
