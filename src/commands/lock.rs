//! `chatshards lock PIPELINE.yaml`: pins every `hub:` entry to a commit and the size and
//! SHA-256 of each file it selects, every local input file to its size and SHA-256, and the
//! template variables, in `PIPELINE.lock` next to the pipeline; with `regenerate:`, each
//! served model's server version too; and the built-in tokenizer and template where the
//! pipeline uses them.
//!
//! Like `uv lock`, entries that still match the pipeline (same repo, kind, revision and
//! `files`) are kept as they are, so relocking is stable and needs no network; `--upgrade`
//! re-resolves everything, `--check` only verifies.

use crate::engine::progress::FetchBars;
use crate::hub::{self, Hub, HubError, LockedFile, LockedRepo, LockedServer, Lockfile};
use crate::printer::Printer;
use anyhow::Result;
use std::path::PathBuf;

pub struct LockArgs {
    pub pipeline: PathBuf,
    /// Verify the lockfile against the pipeline; write nothing.
    pub check: bool,
    /// Re-resolve every revision, even where the lockfile still matches.
    pub upgrade: bool,
}

pub fn run(args: &LockArgs, printer: &Printer) -> Result<()> {
    let pipeline = args.pipeline.as_path();
    let fail = |error: HubError| anyhow::anyhow!(error.explained(pipeline));
    let specs = hub::hub_specs_of(pipeline).map_err(fail)?;
    let (config, _) = crate::plan::parse(pipeline)?;
    let local = crate::plan::local_files(pipeline, &config);
    let kwargs = crate::plan::template_kwargs(&config);
    let models = crate::plan::regenerated_models(&config);
    let embedded = crate::plan::embedded_inputs(&config);
    let lock_path = Lockfile::path_for(pipeline);
    let existing = if lock_path.exists() {
        match Lockfile::read(&lock_path) {
            Ok(lock) => Some(lock),
            // `--upgrade` rebuilds from scratch, so an unreadable lockfile is no obstacle.
            Err(error) if args.upgrade && !args.check => {
                printer.info(&format!("warning: {error}; replacing it"));
                None
            }
            Err(error) => return Err(fail(error)),
        }
    } else {
        None
    };

    if args.check {
        let Some(lock) = existing else {
            anyhow::bail!(
                "there is no lockfile `{}`\n\nhint: run `chatshards lock {}` to create it",
                lock_path.display(),
                pipeline.display()
            );
        };
        let mut reasons = match lock.check(&specs) {
            Ok(()) => Vec::new(),
            Err(HubError::StaleLock { reasons, .. }) => reasons,
            Err(error) => return Err(fail(error.with_lock_path(&lock_path))),
        };
        reasons.extend(lock.check_local(&local, &kwargs));
        reasons.extend(lock.check_servers(&models.keys().cloned().collect::<Vec<_>>()));
        reasons.extend(lock.check_embedded(&embedded));
        if !reasons.is_empty() {
            return Err(fail(HubError::StaleLock {
                path: Some(lock_path),
                reasons,
            }));
        }
        printer.info(&format!("`{}` is up to date", lock_path.display()));
        return Ok(());
    }

    let bars = FetchBars::new(printer);
    // Started only if some entry needs resolving: relocking an up-to-date pipeline is offline.
    let hub_client: std::cell::OnceCell<Hub> = std::cell::OnceCell::new();
    let mut entries: Vec<LockedRepo> = Vec::new();
    for spec in hub::merge_specs(&specs) {
        let kept = existing
            .as_ref()
            .filter(|_| !args.upgrade)
            .and_then(|lock| lock.entry(spec.kind, &spec.repo, &spec.revision))
            .filter(|entry| entry.requested == spec.files);
        if let Some(entry) = kept {
            entries.push(entry.clone());
            continue;
        }
        let hub_ready = match hub_client.get() {
            Some(hub_ready) => hub_ready,
            None => {
                let started = Hub::from_env().map_err(fail)?;
                hub_client.get_or_init(|| started)
            }
        };
        let entry = hub_ready.pin(&spec, &bars).map_err(|error| {
            bars.clear();
            fail(error)
        })?;
        printer.info(&format!(
            "Locked {} `{}` at `{}` to `{}` ({} files)",
            entry.kind,
            entry.repo,
            entry.revision,
            &entry.commit[..12.min(entry.commit.len())],
            entry.files.len()
        ));
        entries.push(entry);
    }
    bars.clear();

    let mut pinned = Vec::with_capacity(local.len());
    for (shown, path) in &local {
        let (size, sha256) = hub::hash_file(path)
            .map_err(|e| anyhow::anyhow!("failed to read `{}`: {e}", path.display()))?;
        pinned.push(LockedFile {
            path: shown.clone(),
            size,
            sha256,
        });
    }
    // Each served model's version: kept from the lockfile like a Hub entry (relocking needs no
    // server), asked of its endpoints when new or with `--upgrade`.
    let mut servers = Vec::with_capacity(models.len());
    for (model, endpoints) in &models {
        let kept = existing
            .as_ref()
            .filter(|_| !args.upgrade)
            .and_then(|lock| lock.server(model));
        if let Some(server) = kept {
            servers.push(server.clone());
            continue;
        }
        let server_version = crate::regenerate::served_version(endpoints, model)?;
        printer.info(&format!(
            "Locked regenerate model `{model}` at server version {}",
            server_version
                .as_deref()
                .unwrap_or("none (the server reports none)")
        ));
        servers.push(LockedServer {
            model: model.clone(),
            server_version,
        });
    }
    let lock = Lockfile::with_local(entries, pinned, &kwargs)
        .with_servers(servers)
        .with_embedded(embedded);
    let bytes = lock.to_bytes();
    if std::fs::read(&lock_path).ok().as_deref() == Some(bytes.as_slice()) {
        printer.info(&format!("`{}` is up to date", lock_path.display()));
    } else {
        lock.write(&lock_path).map_err(fail)?;
        let files: usize = lock.repos.iter().map(|entry| entry.files.len()).sum();
        printer.info(&format!(
            "Wrote `{}` ({} repos, {} Hub files, {} local files)",
            lock_path.display(),
            lock.repos.len(),
            files,
            lock.local.len()
        ));
    }
    Ok(())
}
