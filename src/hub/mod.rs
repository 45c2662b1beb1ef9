//! The Hugging Face Hub: pin revisions to commits, fetch files into the shared HF cache, and
//! hand the build verified local paths — with no network at all when a lockfile pins them.
//!
//! Input: [`HubSpec`]s (a pipeline's `hub:` entries, read by [`hub_specs_of`] or the planner).
//! Output: [`ResolvedFile`]s (repo, commit, path, size, SHA-256, local path) and the
//! [`Lockfile`] next to the pipeline. Errors: [`HubError`], each with a [`HubError::hint`].
//!
//! The cache is the standard one (`HF_HUB_CACHE`), laid out as Python `huggingface_hub` lays it
//! out, so either tool reuses what the other downloaded. See [`Hub`] for what talks to the
//! network and when.

mod cache;
mod client;
mod config;
mod download;
mod error;
mod lockfile;
mod progress;
mod resolve;
mod specs;

pub use crate::model::digest::hash_file;
pub use client::Hub;
pub use config::{merge_specs, HubConfig, HubEntry, HubSpec, RepoKind, Token};
pub use error::{Expected, FileRef, HubError, StaleReason};
pub use lockfile::{kwargs_json, LockedEmbedded, LockedFile, LockedRepo, LockedServer, Lockfile};
pub use progress::{FetchProgress, NoProgress};
pub use resolve::ResolvedFile;
pub use specs::{hub_specs_in, hub_specs_of};
