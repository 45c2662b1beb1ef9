//! How fetching reports progress. The hub layer only calls this trait; the CLI draws bars
//! (`engine::progress::FetchBars`), tests count events, and [`NoProgress`] ignores them.

use super::ResolvedFile;

/// Download events. Called from the download threads, hence `Sync`; every method has a no-op
/// default so implementations pick what they show.
pub trait FetchProgress: Sync {
    /// A download of `label` (`owner/name/path`) starts or resumes: `size` bytes in total,
    /// `resumed_from` of them already on disk from an earlier attempt.
    fn download_started(&self, _label: &str, _size: u64, _resumed_from: u64) {}

    /// `bytes` more bytes of `label` arrived.
    fn downloaded(&self, _label: &str, _bytes: u64) {}

    /// A file is in the cache and verified; `downloaded` is false when it was already there.
    fn file_ready(&self, _file: &ResolvedFile, _downloaded: bool) {}
}

/// Reports nothing.
pub struct NoProgress;

impl FetchProgress for NoProgress {}
