//! The hub layer against a loopback Hub (`hub_support`): the real `hf-hub` client and our
//! downloads, cache layout, lockfile and errors, with injected faults. Every test has its own
//! server, cache directory and explicit `HubConfig`; nothing reads or changes the process
//! environment, and nothing contacts huggingface.co.

use crate::common::hub as hub_support;

use chatshards::hub::{
    Expected, FetchProgress, Hub, HubConfig, HubError, HubSpec, LockedFile, LockedRepo, Lockfile,
    NoProgress, RepoKind, ResolvedFile, StaleReason, Token,
};
use hub_support::{dead_endpoint, noise, sha256, FakeFile, FakeHub, FakeRepo, Logged, Truncate};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";
const M1: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DATASET: &str = "acme/chat-mix";
const MODEL: &str = "acme/tiny-model";
const PARQUET0: &str = "data/train-00000-of-00002.parquet";
const PARQUET1: &str = "data/train-00001-of-00002.parquet";

fn dataset_files() -> Vec<FakeFile> {
    vec![
        FakeFile::new("README.md", b"# chat mix\n".to_vec(), false),
        FakeFile::new(PARQUET0, noise(1, 300_000), true),
        FakeFile::new(PARQUET1, noise(2, 200_000), true),
        FakeFile::new(
            "data/with space.jsonl",
            b"{\"messages\": []}\n".to_vec(),
            false,
        ),
    ]
}

fn model_files() -> Vec<FakeFile> {
    vec![
        FakeFile::new("tokenizer.json", noise(3, 5_000), false),
        FakeFile::new(
            "chat_template.jinja",
            b"{% for m in messages %}{{ m.content }}{% endfor %}".to_vec(),
            false,
        ),
    ]
}

fn file(path: &str) -> FakeFile {
    dataset_files()
        .into_iter()
        .chain(model_files())
        .find(|file| file.path == path)
        .unwrap_or_else(|| panic!("no fixture file {path}"))
}

/// Tree pages of two entries, so every listing exercises pagination.
fn fixture_hub() -> FakeHub {
    FakeHub::start(
        vec![
            FakeRepo::dataset(DATASET).commit("main", C1, dataset_files()),
            FakeRepo::model(MODEL).commit("main", M1, model_files()),
        ],
        2,
    )
}

/// Short timeouts and backoff: faults resolve in milliseconds, not seconds.
fn config(endpoint: &str, cache: &Path) -> HubConfig {
    let mut config = HubConfig::new(endpoint, cache);
    config.connect_timeout = Duration::from_secs(2);
    config.read_timeout = Duration::from_secs(2);
    config.retries = 2;
    config.retry_base_delay = Duration::from_millis(10);
    config
}

fn hub_at(endpoint: &str, cache: &Path) -> Hub {
    Hub::with_config(config(endpoint, cache)).expect("hub")
}

fn spec(repo: &str, kind: RepoKind, revision: &str, files: &[&str]) -> HubSpec {
    HubSpec {
        repo: repo.to_owned(),
        kind,
        revision: revision.to_owned(),
        files: files.iter().map(|f| f.to_string()).collect(),
    }
}

fn dataset_spec(files: &[&str]) -> HubSpec {
    spec(DATASET, RepoKind::Dataset, "main", files)
}

fn repo_dir(cache: &Path, kind: RepoKind, repo: &str) -> PathBuf {
    let plural = match kind {
        RepoKind::Model => "models",
        RepoKind::Dataset => "datasets",
    };
    cache.join(format!("{plural}--{}", repo.replace('/', "--")))
}

fn expected(cache: &Path, kind: RepoKind, repo: &str, commit: &str, path: &str) -> ResolvedFile {
    let fixture = file(path);
    ResolvedFile {
        repo: repo.to_owned(),
        kind,
        revision: "main".to_owned(),
        commit: commit.to_owned(),
        path: path.to_owned(),
        size: fixture.bytes.len() as u64,
        sha256: fixture.sha256(),
        local: repo_dir(cache, kind, repo)
            .join("snapshots")
            .join(commit)
            .join(path),
    }
}

/// Requests that transferred the content of `fixture` (the CDN for LFS files).
fn downloads(hub: &FakeHub, fixture: &FakeFile) -> Vec<Logged> {
    hub.log()
        .into_iter()
        .filter(|request| {
            request.method == "GET"
                && if fixture.lfs {
                    request.target == format!("/cdn/{}", fixture.sha256())
                } else {
                    request.target.contains("/resolve/")
                        && request.target.ends_with(&format!("/{}", fixture.path))
                }
        })
        .collect()
}

/// The first parquet fixture arrived whole at `local`, fetched by GETs with exactly these
/// `Range` headers (`None`: a plain GET).
fn assert_complete_with_ranges(hub: &FakeHub, local: &Path, want: &[Option<String>]) {
    assert_eq!(std::fs::read(local).expect("read"), file(PARQUET0).bytes);
    assert_eq!(ranges(&downloads(hub, &file(PARQUET0))), want);
}

fn ranges(requests: &[Logged]) -> Vec<Option<String>> {
    requests
        .iter()
        .map(|request| request.range.clone())
        .collect()
}

fn blobs(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(repo_dir(cache, RepoKind::Dataset, DATASET).join("blobs"))
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok())
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
    names.sort();
    names
}

fn message_and_hint(error: &HubError) -> (String, Option<String>) {
    (error.to_string(), error.hint())
}

#[test]
fn resolve_fills_the_standard_cache_layout() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let files = client
        .resolve(&dataset_spec(&["*.parquet", "README.md"]), &NoProgress)
        .expect("resolve");
    let want: Vec<ResolvedFile> = ["README.md", PARQUET0, PARQUET1]
        .iter()
        .map(|path| expected(cache.path(), RepoKind::Dataset, DATASET, C1, path))
        .collect();
    assert_eq!(files, want);

    let root = repo_dir(cache.path(), RepoKind::Dataset, DATASET);
    for (path, link) in [
        (
            "README.md",
            format!("../../blobs/{}", file("README.md").git_oid()),
        ),
        (
            PARQUET0,
            format!("../../../blobs/{}", file(PARQUET0).sha256()),
        ),
        (
            PARQUET1,
            format!("../../../blobs/{}", file(PARQUET1).sha256()),
        ),
    ] {
        let pointer = root.join("snapshots").join(C1).join(path);
        assert_eq!(
            std::fs::read_link(&pointer).expect("symlink"),
            PathBuf::from(link)
        );
        assert_eq!(std::fs::read(&pointer).expect("read"), file(path).bytes);
    }
    assert_eq!(
        std::fs::read_to_string(root.join("refs/main")).expect("ref"),
        C1
    );
    let mut want_blobs = vec![
        file("README.md").git_oid(),
        file(PARQUET0).sha256(),
        file(PARQUET1).sha256(),
    ];
    want_blobs.sort();
    assert_eq!(
        blobs(cache.path()),
        want_blobs,
        "no .incomplete left behind"
    );

    // Five tree entries (one directory, four files) at two a page: three pages.
    let tree_pages: Vec<String> = hub
        .log()
        .into_iter()
        .filter(|request| request.target.contains("/tree/"))
        .map(|request| request.target)
        .collect();
    assert_eq!(
        tree_pages,
        vec![
            format!("/api/datasets/{DATASET}/tree/{C1}?recursive=true"),
            format!("/api/datasets/{DATASET}/tree/{C1}?recursive=true&cursor=2"),
            format!("/api/datasets/{DATASET}/tree/{C1}?recursive=true&cursor=4"),
        ]
    );
    for path in ["README.md", PARQUET0, PARQUET1] {
        assert_eq!(ranges(&downloads(&hub, &file(path))), vec![None], "{path}");
    }
    // No token configured: none is sent, whatever the environment holds.
    assert!(hub
        .log()
        .iter()
        .all(|request| request.authorization.is_none()));
}

#[test]
fn a_second_resolve_downloads_nothing() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let wanted = dataset_spec(&["data/*"]);
    let first = client.resolve(&wanted, &NoProgress).expect("first");
    hub.clear_log();
    let second = client.resolve(&wanted, &NoProgress).expect("second");
    assert_eq!(first, second);
    assert_eq!(first.len(), 3);
    for path in [PARQUET0, PARQUET1, "data/with space.jsonl"] {
        assert_eq!(
            downloads(&hub, &file(path)),
            vec![],
            "{path} downloaded again"
        );
    }
}

#[test]
fn a_server_error_is_retried() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    {
        let mut faults = hub.faults();
        faults.fail_api = 1;
        faults.fail_content.insert(PARQUET0.to_owned(), 1);
    }
    let client = hub_at(&hub.url(), cache.path());
    let files = client
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect("resolve after retries");
    assert_eq!(
        files,
        vec![expected(
            cache.path(),
            RepoKind::Dataset,
            DATASET,
            C1,
            PARQUET0
        )]
    );
    let revision_calls = hub
        .log()
        .iter()
        .filter(|request| {
            request
                .target
                .starts_with(&format!("/api/datasets/{DATASET}/revision/main"))
        })
        .count();
    assert_eq!(revision_calls, 2, "the 500 was retried once");
    assert_eq!(ranges(&downloads(&hub, &file(PARQUET0))), vec![None, None]);
}

#[test]
fn a_truncated_download_resumes_with_a_range_request() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults().truncate.insert(
        PARQUET0.to_owned(),
        Truncate {
            at: 100_000,
            times: 1,
        },
    );
    let client = hub_at(&hub.url(), cache.path());
    let files = client
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect("resolve");
    assert_complete_with_ranges(
        &hub,
        &files[0].local,
        &[None, Some("bytes=100000-299999".to_owned())],
    );
}

#[test]
fn a_download_that_keeps_breaking_fails_clearly_and_resumes_later() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults().truncate.insert(
        PARQUET0.to_owned(),
        Truncate {
            at: 100_000,
            times: usize::MAX,
        },
    );
    let client = hub_at(&hub.url(), cache.path());
    let error = client
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect_err("keeps breaking");
    let sha = file(PARQUET0).sha256();
    let partial = repo_dir(cache.path(), RepoKind::Dataset, DATASET)
        .join("blobs")
        .join(format!("{sha}.incomplete"));
    // One attempt that got 100,000 bytes, then `retries` + 1 that got nothing.
    assert_eq!(
        message_and_hint(&error),
        (
            format!(
                "download of `{PARQUET0}` from dataset `{DATASET}` at commit `{C1}` stopped at 100000 of 300000 bytes after 4 attempts: the connection closed early"
            ),
            Some(
                "run the command again: the download resumes from the partial `.incomplete` file in the cache"
                    .to_owned()
            )
        )
    );
    assert!(matches!(&error, HubError::Truncated { partial: p, .. } if *p == partial));
    assert_eq!(
        std::fs::read(&partial).expect("partial kept"),
        file(PARQUET0).bytes[..100_000]
    );
    assert!(!repo_dir(cache.path(), RepoKind::Dataset, DATASET)
        .join("snapshots")
        .join(C1)
        .join(PARQUET0)
        .exists());

    // The network heals; the next run picks up at byte 100,000.
    hub.faults().truncate.clear();
    hub.clear_log();
    let files = client
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect("resumed");
    assert_complete_with_ranges(
        &hub,
        &files[0].local,
        &[Some("bytes=100000-299999".to_owned())],
    );
    assert!(!partial.exists());
}

#[test]
fn wrong_bytes_fail_the_hash_check_and_leave_nothing_behind() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults().corrupt.insert(PARQUET0.to_owned());
    hub.faults().corrupt.insert("README.md".to_owned());
    let client = hub_at(&hub.url(), cache.path());

    let mut corrupted = file(PARQUET0).bytes;
    corrupted[150_000] ^= 0xff;
    let error = client
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect_err("corrupt");
    assert_eq!(
        message_and_hint(&error),
        (
            format!(
                "`{PARQUET0}` from dataset `{DATASET}` at commit `{C1}` has sha256 `{}`, but the Hub says `{}`",
                sha256(&corrupted),
                file(PARQUET0).sha256()
            ),
            Some(
                "the bad download was deleted; run again, and if it repeats, a proxy or mirror (`HF_ENDPOINT`) \
                 is serving different bytes than the Hub lists"
                    .to_owned()
            )
        )
    );

    let mut corrupted = file("README.md").bytes;
    let middle = corrupted.len() / 2;
    corrupted[middle] ^= 0xff;
    let error = client
        .resolve(&dataset_spec(&["README.md"]), &NoProgress)
        .expect_err("corrupt");
    assert_eq!(
        error.to_string(),
        format!(
            "`README.md` from dataset `{DATASET}` at commit `{C1}` has git blob sha1 `{}`, but the Hub says `{}`",
            hub_support::git_oid(&corrupted),
            file("README.md").git_oid()
        )
    );
    assert_eq!(blobs(cache.path()), Vec::<String>::new());
    assert!(!repo_dir(cache.path(), RepoKind::Dataset, DATASET)
        .join("snapshots")
        .exists());
}

#[test]
fn a_gated_repo_says_to_accept_the_terms_and_set_a_token() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults().gated.insert(DATASET.to_owned());
    let restricted = format!(
        "Access to dataset {DATASET} is restricted. You must have access to it and be authenticated to access it. Please log in."
    );

    let error = hub_at(&hub.url(), cache.path())
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("gated");
    assert_eq!(
        message_and_hint(&error),
        (
            format!("dataset `{DATASET}` is gated: the Hub refused access (HTTP 401): {restricted}"),
            Some(format!(
                "accept the terms on {}/datasets/{DATASET} with your Hugging Face account, then set `HF_TOKEN` \
                 to a read token of that account (or run `hf auth login`)",
                hub.url()
            ))
        )
    );

    let mut with_token = config(&hub.url(), cache.path());
    with_token.token = Some(Token::new("hf_NotGrantedYet0000"));
    let error = Hub::with_config(with_token)
        .expect("hub")
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("gated");
    assert_eq!(
        message_and_hint(&error),
        (
            format!("dataset `{DATASET}` is gated: the Hub refused access (HTTP 403): {restricted}"),
            Some(format!(
                "the account behind `HF_TOKEN` has not been granted access: accept the terms on {}/datasets/{DATASET} \
                 with that account (and wait for approval if the repo asks for it)",
                hub.url()
            ))
        )
    );
}

#[test]
fn missing_repo_revision_and_files_are_named() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let fail = |spec: HubSpec| {
        message_and_hint(&client.resolve(&spec, &NoProgress).expect_err("should fail"))
    };

    assert_eq!(
        fail(spec("acme/nope", RepoKind::Dataset, "main", &["*.parquet"])),
        (
            format!("dataset `acme/nope` does not exist on `{}`", hub.url()),
            Some(
                "check `repo` (`owner/name`) and `kind` (`model` or `dataset`); private repos also look missing \
                 without `HF_TOKEN`"
                    .to_owned()
            )
        )
    );
    // Right name, wrong kind.
    assert_eq!(
        fail(spec(DATASET, RepoKind::Model, "main", &["*.parquet"])).0,
        format!("model `{DATASET}` does not exist on `{}`", hub.url())
    );
    assert_eq!(
        fail(spec(DATASET, RepoKind::Dataset, "v9", &["*.parquet"])),
        (
            format!("revision `v9` does not exist in dataset `{DATASET}`"),
            Some("check `revision`: a branch, a tag or a full 40-character commit SHA".to_owned())
        )
    );
    assert_eq!(
        fail(dataset_spec(&["data/train.parquet"])),
        (
            format!(
                "`data/train.parquet` does not exist in dataset `{DATASET}` at revision `main`"
            ),
            Some(format!(
                "check `files`; the repo has [`{PARQUET0}`, `{PARQUET1}`]"
            ))
        )
    );
    assert_eq!(
        fail(dataset_spec(&["*.parquet", "*.arrow"])),
        (
            format!("no file in dataset `{DATASET}` at revision `main` matches `*.arrow`"),
            Some(format!(
                "the repo has [`README.md`, `{PARQUET0}`, `{PARQUET1}`, `data/with space.jsonl`]"
            ))
        )
    );
    assert_eq!(
        hub.content_gets(),
        vec![],
        "nothing downloaded for a bad spec"
    );
}

#[test]
fn an_unreachable_endpoint_fails_within_seconds_with_default_settings() {
    let cache = tempfile::tempdir().expect("tempdir");
    let endpoint = dead_endpoint();
    // Default timeouts and retries, as the CLI uses them.
    let client = Hub::with_config(HubConfig::new(&endpoint, cache.path())).expect("hub");
    let started = Instant::now();
    let error = client
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("unreachable");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(6), "took {elapsed:?}");
    let (message, hint) = message_and_hint(&error);
    let prefix = format!(
        "cannot reach the Hub at `{endpoint}` while resolving revision `main` of dataset `{DATASET}`: "
    );
    assert!(message.starts_with(&prefix), "{message}");
    assert!(message.contains("Connection refused"), "{message}");
    assert_eq!(
        hint.as_deref(),
        Some(
            "check the network, or set `HF_ENDPOINT` to a reachable Hub mirror; to build from a warm cache \
             instead, run `chatshards fetch PIPELINE.yaml` once while online, then build with `HF_HUB_OFFLINE=1`"
        )
    );
}

#[test]
fn a_silent_server_times_out_within_the_read_timeout() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults().delay_api = Some(Duration::from_secs(3));
    let mut config = config(&hub.url(), cache.path());
    config.read_timeout = Duration::from_millis(300);
    config.retries = 1;
    let started = Instant::now();
    let error = Hub::with_config(config)
        .expect("hub")
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("timeout");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(2500), "took {elapsed:?}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "the Hub at `{}` stopped answering while resolving revision `main` of dataset `{DATASET}`: ",
            hub.url()
        )),
        "{message}"
    );
    assert!(matches!(error, HubError::Timeout { .. }));
}

#[test]
fn a_stalled_download_resumes_where_it_stopped() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    hub.faults()
        .stall
        .insert(PARQUET0.to_owned(), (50_000, Duration::from_secs(3)));
    let mut config = config(&hub.url(), cache.path());
    config.read_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let files = Hub::with_config(config)
        .expect("hub")
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect("resolve");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "took {:?}",
        started.elapsed()
    );
    assert_complete_with_ranges(
        &hub,
        &files[0].local,
        &[None, Some("bytes=50000-299999".to_owned())],
    );
}

#[test]
fn offline_mode_answers_from_the_cache_alone() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let online = hub_at(&hub.url(), cache.path())
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect("warm the cache");

    // HF_HUB_OFFLINE=1, and the endpoint is dead anyway.
    let mut offline = config(&dead_endpoint(), cache.path());
    offline.offline = true;
    let offline = Hub::with_config(offline).expect("hub");
    hub.clear_log();
    assert_eq!(
        offline
            .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
            .expect("offline"),
        online
    );
    assert_eq!(hub.log(), vec![], "offline mode made a request");

    let cache_dir = cache.path().display().to_string();
    assert_eq!(
        message_and_hint(
            &offline
                .resolve(&dataset_spec(&["data/with space.jsonl"]), &NoProgress)
                .expect_err("not cached")
        ),
        (
            format!(
                "dataset `{DATASET}` at `{C1}`, file `data/with space.jsonl`, is not in the Hugging Face cache `{cache_dir}`"
            ),
            Some(
                "run `chatshards fetch PIPELINE.yaml` with network access (without `HF_HUB_OFFLINE`) first"
                    .to_owned()
            )
        )
    );
    assert_eq!(
        offline
            .resolve(
                &spec(DATASET, RepoKind::Dataset, "v2", &["*.parquet"]),
                &NoProgress
            )
            .expect_err("unknown revision")
            .to_string(),
        format!("dataset `{DATASET}` at `v2` is not in the Hugging Face cache `{cache_dir}`")
    );

    // Without a lockfile, a blob is checked against the digest it is named after.
    let tampered = noise(42, 200_000);
    std::fs::write(&online[1].local, &tampered).expect("tamper");
    assert_eq!(
        message_and_hint(
            &offline
                .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
                .expect_err("tampered")
        ),
        (
            format!(
                "`{PARQUET1}` from dataset `{DATASET}` at commit `{C1}` has sha256 `{}`, but its cache blob name says `{}`",
                sha256(&tampered),
                file(PARQUET1).sha256()
            ),
            Some("the cached file is corrupt: run `chatshards fetch PIPELINE.yaml` to download it again".to_owned())
        )
    );
}

#[test]
fn pin_reads_lfs_hashes_from_the_hub_and_downloads_only_regular_files() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let pinned = hub_at(&hub.url(), cache.path())
        .pin(&dataset_spec(&["*.parquet", "README.md"]), &NoProgress)
        .expect("pin");
    let locked = |path: &str| LockedFile {
        path: path.to_owned(),
        size: file(path).bytes.len() as u64,
        sha256: file(path).sha256(),
    };
    assert_eq!(
        pinned,
        LockedRepo {
            repo: DATASET.to_owned(),
            kind: RepoKind::Dataset,
            revision: "main".to_owned(),
            commit: C1.to_owned(),
            requested: vec!["*.parquet".to_owned(), "README.md".to_owned()],
            files: vec![locked("README.md"), locked(PARQUET0), locked(PARQUET1)],
        }
    );
    assert_eq!(ranges(&downloads(&hub, &file("README.md"))), vec![None]);
    assert_eq!(downloads(&hub, &file(PARQUET0)), vec![]);
    assert_eq!(downloads(&hub, &file(PARQUET1)), vec![]);
}

/// Pins the fixture's dataset parquet files and model files.
fn pin_all(client: &Hub) -> Lockfile {
    Lockfile::new(vec![
        client
            .pin(&dataset_spec(&["*.parquet"]), &NoProgress)
            .expect("pin dataset"),
        client
            .pin(
                &spec(
                    MODEL,
                    RepoKind::Model,
                    "main",
                    &["tokenizer.json", "chat_template.jinja"],
                ),
                &NoProgress,
            )
            .expect("pin model"),
    ])
}

#[test]
fn a_locked_build_reads_the_cache_without_any_network() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let online = hub_at(&hub.url(), cache.path());
    let lock = pin_all(&online);
    let parquets = dataset_spec(&["*.parquet"]);
    let fetched = online
        .fetch_locked(&parquets, &lock, &NoProgress)
        .expect("fetch");

    // Not offline mode: the endpoint is simply unreachable, and nothing needs it.
    let build = hub_at(&dead_endpoint(), cache.path());
    assert_eq!(
        build.resolve_locked(&parquets, &lock).expect("locked"),
        fetched
    );
    // A spec may read a subset of what was locked.
    assert_eq!(
        build
            .resolve_locked(&dataset_spec(&[PARQUET1]), &lock)
            .expect("subset"),
        vec![expected(
            cache.path(),
            RepoKind::Dataset,
            DATASET,
            C1,
            PARQUET1
        )]
    );

    // Tamper with a cached blob (same size): the lockfile catches it.
    let blob = repo_dir(cache.path(), RepoKind::Dataset, DATASET)
        .join("blobs")
        .join(file(PARQUET1).sha256());
    let tampered = noise(99, 200_000);
    std::fs::write(&blob, &tampered).expect("tamper");
    assert_eq!(
        message_and_hint(&build.resolve_locked(&parquets, &lock).expect_err("tampered")),
        (
            format!(
                "`{PARQUET1}` from dataset `{DATASET}` at commit `{C1}` has sha256 `{}`, but the lockfile says `{}`",
                sha256(&tampered),
                file(PARQUET1).sha256()
            ),
            Some(
                "the cached copy differs from what the lockfile pins: run `chatshards fetch PIPELINE.yaml` to \
                 download the pinned bytes again"
                    .to_owned()
            )
        )
    );
    // `fetch` repairs it.
    hub.clear_log();
    online
        .fetch_locked(&parquets, &lock, &NoProgress)
        .expect("repair");
    assert_eq!(ranges(&downloads(&hub, &file(PARQUET1))), vec![None]);
    assert_eq!(downloads(&hub, &file(PARQUET0)), vec![]);
    assert_eq!(
        build.resolve_locked(&parquets, &lock).expect("repaired"),
        fetched
    );

    // A missing file says to fetch.
    std::fs::remove_file(&fetched[0].local).expect("remove pointer");
    assert_eq!(
        message_and_hint(&build.resolve_locked(&parquets, &lock).expect_err("missing")),
        (
            format!(
                "dataset `{DATASET}` at `{C1}`, file `{PARQUET0}`, is not in the Hugging Face cache `{}`",
                cache.path().display()
            ),
            Some("run `chatshards fetch PIPELINE.yaml` first".to_owned())
        )
    );
    // And a spec the lockfile does not cover says to lock.
    assert_eq!(
        message_and_hint(
            &build
                .resolve_locked(&dataset_spec(&["README.md"]), &lock)
                .expect_err("not locked")
        ),
        (
            format!(
                "the lockfile does not pin dataset `{DATASET}` at `main` with files matching `README.md`"
            ),
            Some("run `chatshards lock PIPELINE.yaml` to update the lockfile".to_owned())
        )
    );
}

#[test]
fn fetch_locked_gets_the_locked_commit_after_the_branch_moved() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let lock = pin_all(&client);

    // `main` moves on: a new commit with a different first shard.
    let new_shard = FakeFile::new(PARQUET0, noise(7, 250_000), true);
    {
        let mut repos = hub.repos();
        let mut files = dataset_files();
        files[1] = new_shard.clone();
        let moved = repos[0].clone().commit("main", C2, files);
        repos[0] = moved;
    }
    let parquets = dataset_spec(&["*.parquet"]);
    let locked = client
        .fetch_locked(&parquets, &lock, &NoProgress)
        .expect("fetch locked");
    assert_eq!(
        locked,
        vec![
            expected(cache.path(), RepoKind::Dataset, DATASET, C1, PARQUET0),
            expected(cache.path(), RepoKind::Dataset, DATASET, C1, PARQUET1),
        ]
    );
    // Unlocked, the same spec follows the branch.
    let current = client.resolve(&parquets, &NoProgress).expect("resolve");
    assert_eq!(current[0].commit, C2);
    assert_eq!(current[0].sha256, new_shard.sha256());
    assert_eq!(
        std::fs::read(&current[0].local).expect("read"),
        new_shard.bytes
    );
    // The shard unchanged between commits shares its blob: not downloaded again.
    assert_eq!(ranges(&downloads(&hub, &file(PARQUET1))), vec![None]);

    // If the Hub describes other bytes than the lockfile pins, nothing is downloaded.
    let mut wrong = lock.clone();
    wrong.repos[1].files[0].sha256 = "0".repeat(64);
    let fresh_cache = tempfile::tempdir().expect("tempdir");
    let fresh = hub_at(&hub.url(), fresh_cache.path());
    hub.clear_log();
    let error = fresh
        .fetch_locked(&parquets, &wrong, &NoProgress)
        .expect_err("mismatch");
    assert_eq!(
        error.to_string(),
        format!(
            "`{PARQUET0}` from dataset `{DATASET}` at commit `{C1}` has sha256 `{}`, but the lockfile says `{}`",
            file(PARQUET0).sha256(),
            "0".repeat(64)
        )
    );
    assert!(matches!(
        error,
        HubError::HashMismatch {
            expected_by: Expected::Lockfile,
            ..
        }
    ));
    assert_eq!(downloads(&hub, &file(PARQUET0)), vec![]);
}

#[test]
fn the_lockfile_round_trips_byte_for_byte_and_detects_staleness() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let lock = pin_all(&client);
    let again = pin_all(&client);
    assert_eq!(
        lock.to_bytes(),
        again.to_bytes(),
        "locking twice gives the same bytes"
    );

    let entry = |path: &str| {
        format!(
            "      - path: \"{path}\"\n        size: {}\n        sha256: \"{}\"\n",
            file(path).bytes.len(),
            file(path).sha256()
        )
    };
    let expected_text = format!(
        "# Generated by `chatshards lock`: the Hub commits and files and the local files this pipeline reads.\n\
         # Do not edit. `chatshards lock` updates it; `chatshards fetch` downloads it.\n\
         version: 2\n\
         repos:\n\
         \x20 - repo: \"{MODEL}\"\n\
         \x20   kind: model\n\
         \x20   revision: \"main\"\n\
         \x20   commit: \"{M1}\"\n\
         \x20   requested: [\"chat_template.jinja\", \"tokenizer.json\"]\n\
         \x20   files:\n\
         {}{}\
         \x20 - repo: \"{DATASET}\"\n\
         \x20   kind: dataset\n\
         \x20   revision: \"main\"\n\
         \x20   commit: \"{C1}\"\n\
         \x20   requested: [\"*.parquet\"]\n\
         \x20   files:\n\
         {}{}\
         local: []\n\
         template_kwargs: \"{{}}\"\n",
        entry("chat_template.jinja"),
        entry("tokenizer.json"),
        entry(PARQUET0),
        entry(PARQUET1),
    );
    assert_eq!(
        String::from_utf8(lock.to_bytes()).expect("utf8"),
        expected_text
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = Lockfile::path_for(&dir.path().join("mix.yaml"));
    assert_eq!(path, dir.path().join("mix.lock"));
    lock.write(&path).expect("write");
    let read = Lockfile::read(&path).expect("read");
    assert_eq!(read, lock);
    read.write(&path).expect("rewrite");
    assert_eq!(
        std::fs::read(&path).expect("bytes"),
        expected_text.into_bytes()
    );

    let model = spec(MODEL, RepoKind::Model, "main", &["tokenizer.json"]);
    let template = spec(MODEL, RepoKind::Model, "main", &["chat_template.jinja"]);
    assert!(read
        .check(&[
            model.clone(),
            template.clone(),
            dataset_spec(&["*.parquet"])
        ])
        .is_ok());
    let stale = |specs: &[HubSpec]| match read.check(specs) {
        Err(HubError::StaleLock { reasons, .. }) => reasons,
        other => panic!("expected stale, got {other:?}"),
    };
    assert_eq!(
        stale(&[
            model.clone(),
            template.clone(),
            spec(DATASET, RepoKind::Dataset, "v2", &["*.parquet"])
        ]),
        vec![
            StaleReason::Missing {
                kind: RepoKind::Dataset,
                repo: DATASET.to_owned(),
                revision: "v2".to_owned()
            },
            StaleReason::Unused {
                kind: RepoKind::Dataset,
                repo: DATASET.to_owned(),
                revision: "main".to_owned()
            },
        ]
    );
    assert_eq!(
        stale(&[model, template, dataset_spec(&["*.parquet", "README.md"])]),
        vec![StaleReason::FilesChanged {
            kind: RepoKind::Dataset,
            repo: DATASET.to_owned(),
            revision: "main".to_owned(),
            locked: vec!["*.parquet".to_owned()],
            wanted: vec!["*.parquet".to_owned(), "README.md".to_owned()],
        }]
    );
}

#[test]
fn the_token_is_sent_but_never_shown() {
    const SECRET: &str = "hf_TopSecretToken1234567890";
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    {
        let mut faults = hub.faults();
        faults.gated.insert(DATASET.to_owned());
        // A careless proxy that quotes the Authorization header back.
        faults.echo_auth = true;
    }
    let mut config = config(&hub.url(), cache.path());
    config.token = Some(Token::new(SECRET));
    let client = Hub::with_config(config.clone()).expect("hub");
    let error = client
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("gated");
    assert!(
        hub.log()
            .iter()
            .any(|request| request.authorization.as_deref() == Some(&format!("Bearer {SECRET}"))),
        "the token was not sent"
    );
    let shown = [
        error.to_string(),
        format!("{error:?}"),
        error.hint().unwrap_or_default(),
        format!("{client:?}"),
        format!("{config:?}"),
    ];
    for text in &shown {
        assert!(!text.contains(SECRET), "token leaked in: {text}");
    }
    assert!(
        shown[0].ends_with("Please log in. (sent: Bearer ***)"),
        "{}",
        shown[0]
    );

    // Transport errors too.
    let mut dead = HubConfig::new(dead_endpoint(), cache.path());
    dead.token = Some(Token::new(SECRET));
    dead.retries = 0;
    let error = Hub::with_config(dead)
        .expect("hub")
        .resolve(&dataset_spec(&["*.parquet"]), &NoProgress)
        .expect_err("dead");
    assert!(!format!("{error} {error:?}").contains(SECRET));
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_reported_as_such() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    // The blobs folder is a one-page tmpfs, so the download runs out of space. (A link to
    // /dev/full no longer works: the tool refuses to write through a symbolic link.)
    let blobs = repo_dir(cache.path(), RepoKind::Dataset, DATASET).join("blobs");
    std::fs::create_dir_all(&blobs).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k", "tmpfs"])
        .arg(&blobs)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("skipping: a small tmpfs cannot be mounted here (needs root)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&blobs);
    let partial = blobs.join(format!("{}.incomplete", file(PARQUET0).sha256()));
    let error = hub_at(&hub.url(), cache.path())
        .resolve(&dataset_spec(&[PARQUET0]), &NoProgress)
        .expect_err("disk full");
    assert_eq!(
        message_and_hint(&error),
        (
            format!("no space left on the device holding `{}`", partial.display()),
            Some(
                "free space on that disk or point `HF_HUB_CACHE` at a larger one; the partial download is kept \
                 and resumes"
                    .to_owned()
            )
        )
    );
}

#[test]
fn progress_reports_each_download() {
    #[derive(Default)]
    struct Recorder {
        events: Mutex<Vec<String>>,
        bytes: Mutex<u64>,
    }
    impl FetchProgress for Recorder {
        fn download_started(&self, label: &str, size: u64, resumed_from: u64) {
            if let Ok(mut events) = self.events.lock() {
                events.push(format!("start {label} {size} {resumed_from}"));
            }
        }
        fn downloaded(&self, _label: &str, bytes: u64) {
            if let Ok(mut total) = self.bytes.lock() {
                *total += bytes;
            }
        }
        fn file_ready(&self, file: &ResolvedFile, downloaded: bool) {
            if let Ok(mut events) = self.events.lock() {
                events.push(format!("ready {} {downloaded}", file.path));
            }
        }
    }
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let client = hub_at(&hub.url(), cache.path());
    let recorder = Recorder::default();
    client
        .resolve(&dataset_spec(&["*.parquet"]), &recorder)
        .expect("resolve");
    let mut events = recorder.events.lock().expect("events").clone();
    events.sort();
    assert_eq!(
        events,
        vec![
            format!("ready {PARQUET0} true"),
            format!("ready {PARQUET1} true"),
            format!("start {DATASET}/{PARQUET0} 300000 0"),
            format!("start {DATASET}/{PARQUET1} 200000 0"),
        ]
    );
    assert_eq!(*recorder.bytes.lock().expect("bytes"), 500_000);
}

// ---------------------------------------------------------------------------------------------
// Interop with Python `huggingface_hub`: one cache, either tool writing, the other reading.

/// Runs `python3 -c script args…` with a clean Hugging Face environment plus `env`; `None` (and
/// a notice) when Python or `huggingface_hub` is missing.
fn python(script: &str, args: &[&str], env: &[(&str, String)]) -> Option<String> {
    let available = Command::new("python3")
        .args(["-c", "import huggingface_hub"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !available {
        eprintln!("skipping: python3 with `huggingface_hub` is not installed");
        return None;
    }
    let mut command = Command::new("python3");
    command.arg("-c").arg(script).args(args);
    for name in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
    ] {
        command.env_remove(name);
    }
    command.env("HF_HUB_DISABLE_TELEMETRY", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run python3");
    assert!(
        output.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

const PY_DOWNLOAD: &str = r#"
import hashlib, json, sys
from huggingface_hub import hf_hub_download
repo, revision, offline = sys.argv[1], sys.argv[2], sys.argv[3] == "offline"
out = []
for name in sys.argv[4:]:
    path = hf_hub_download(repo, name, repo_type="dataset", revision=revision, local_files_only=offline)
    with open(path, "rb") as f:
        out.append([name, path, hashlib.sha256(f.read()).hexdigest()])
print(json.dumps(out))
"#;

#[test]
fn python_reads_a_cache_we_wrote() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let ours = hub_at(&hub.url(), cache.path())
        .resolve(&dataset_spec(&["*.parquet", "README.md"]), &NoProgress)
        .expect("resolve");
    let env = [
        ("HF_HUB_CACHE", cache.path().display().to_string()),
        ("HF_HOME", home.path().display().to_string()),
        ("HF_HUB_OFFLINE", "1".to_owned()),
        ("HF_ENDPOINT", dead_endpoint()),
    ];
    for revision in ["main", C1] {
        let Some(stdout) = python(
            PY_DOWNLOAD,
            &[
                DATASET,
                revision,
                "offline",
                "README.md",
                PARQUET0,
                PARQUET1,
            ],
            &env,
        ) else {
            return;
        };
        let theirs: Vec<(String, PathBuf, String)> =
            serde_json::from_str(&stdout).expect("python output");
        let ours: Vec<(String, PathBuf, String)> = ours
            .iter()
            .map(|file| (file.path.clone(), file.local.clone(), file.sha256.clone()))
            .collect();
        assert_eq!(theirs, ours, "revision {revision}");
    }
}

#[test]
fn we_read_a_cache_python_wrote() {
    let hub = fixture_hub();
    let cache = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let env = [
        ("HF_HUB_CACHE", cache.path().display().to_string()),
        ("HF_HOME", home.path().display().to_string()),
        ("HF_ENDPOINT", hub.url()),
    ];
    let Some(stdout) = python(
        PY_DOWNLOAD,
        &[DATASET, "main", "online", "README.md", PARQUET0, PARQUET1],
        &env,
    ) else {
        return;
    };
    let theirs: Vec<(String, PathBuf, String)> =
        serde_json::from_str(&stdout).expect("python output");

    // Python named the blobs exactly as we do, so either tool reuses the other's downloads.
    let mut want_blobs = vec![
        file("README.md").etag(),
        file(PARQUET0).etag(),
        file(PARQUET1).etag(),
    ];
    want_blobs.sort();
    assert_eq!(blobs(cache.path()), want_blobs);

    // A lockfile for those files; the build side has no network at all.
    let locked = |path: &str| LockedFile {
        path: path.to_owned(),
        size: file(path).bytes.len() as u64,
        sha256: file(path).sha256(),
    };
    let lock = Lockfile::new(vec![LockedRepo {
        repo: DATASET.to_owned(),
        kind: RepoKind::Dataset,
        revision: "main".to_owned(),
        commit: C1.to_owned(),
        requested: vec!["*.parquet".to_owned(), "README.md".to_owned()],
        files: vec![locked("README.md"), locked(PARQUET0), locked(PARQUET1)],
    }]);
    let wanted = dataset_spec(&["*.parquet", "README.md"]);
    hub.clear_log();
    let build = hub_at(&dead_endpoint(), cache.path());
    let ours = build.resolve_locked(&wanted, &lock).expect("locked");
    let ours_triples: Vec<(String, PathBuf, String)> = ours
        .iter()
        .map(|file| (file.path.clone(), file.local.clone(), file.sha256.clone()))
        .collect();
    assert_eq!(ours_triples, theirs);

    // Offline and unlocked, Python's `refs/main` resolves the revision.
    let mut offline = config(&dead_endpoint(), cache.path());
    offline.offline = true;
    assert_eq!(
        Hub::with_config(offline)
            .expect("hub")
            .resolve(&wanted, &NoProgress)
            .expect("offline"),
        ours
    );
    // And an online fetch finds everything in place.
    hub_at(&hub.url(), cache.path())
        .fetch_locked(&wanted, &lock, &NoProgress)
        .expect("fetch");
    assert_eq!(
        hub.log(),
        vec![],
        "nothing was requested: the cache had it all"
    );
}

// ---------------------------------------------------------------------------------------------
// The `lock` and `fetch` commands, end to end through the binary.

fn chatshards(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_chatshards"));
    command.args(args).env("CHATSHARDS_NO_PROGRESS", "1");
    for name in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run chatshards")
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write_pipeline(path: &Path, dataset_files: &str) {
    let yaml = format!(
        "name: mix\n\
         tokenizer:\n  path: tokenizer.json\n  hub: {{repo: {MODEL}, files: [tokenizer.json]}}\n\
         template:\n  path: chat_template.jinja\n  hub: {{repo: {MODEL}, files: [chat_template.jinja]}}\n\
         sources:\n  - name: chat\n    files: [x.parquet]\n    format: openai\n    hub: {{repo: {DATASET}, files: {dataset_files}}}\n\
         output: {{dir: out}}\n"
    );
    std::fs::write(path, yaml).expect("write pipeline");
}

#[test]
fn cli_lock_fetch_and_offline_fetch() {
    let hub = fixture_hub();
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let pipeline = dir.path().join("mix.yaml");
    let lock_path = dir.path().join("mix.lock");
    write_pipeline(&pipeline, "[\"*.parquet\"]");
    let pipeline_arg = pipeline.display().to_string();
    let online = [
        ("HF_ENDPOINT", hub.url()),
        ("HF_HUB_CACHE", cache.display().to_string()),
        ("HF_HOME", dir.path().join("home").display().to_string()),
    ];

    let locked = chatshards(&["lock", &pipeline_arg], &online);
    assert!(locked.status.success(), "{}", stderr(&locked));
    // Regular (non-LFS) files are downloaded to hash them, in parallel, so in any order.
    let text = stderr(&locked);
    let (mut downloaded, summary): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|line| line.starts_with("Downloaded "));
    downloaded.sort();
    assert_eq!(
        downloaded,
        vec![
            "Downloaded model acme/tiny-model/chat_template.jinja (50 B)",
            "Downloaded model acme/tiny-model/tokenizer.json (4.88 KiB)",
        ]
    );
    assert_eq!(
        summary,
        vec![
            format!("Locked model `{MODEL}` at `main` to `aaaaaaaaaaaa` (2 files)"),
            format!("Locked dataset `{DATASET}` at `main` to `111111111111` (2 files)"),
            format!(
                "Wrote `{}` (2 repos, 4 Hub files, 0 local files)",
                lock_path.display()
            ),
        ]
    );
    let first = std::fs::read(&lock_path).expect("lockfile");
    let library_cache = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        first,
        pin_all(&hub_at(&hub.url(), library_cache.path())).to_bytes()
    );

    // Relocking an up-to-date pipeline keeps every entry and asks the network nothing.
    hub.clear_log();
    let relocked = chatshards(&["lock", &pipeline_arg], &online);
    assert!(relocked.status.success());
    assert_eq!(
        stderr(&relocked),
        format!("`{}` is up to date\n", lock_path.display())
    );
    assert_eq!(std::fs::read(&lock_path).expect("lockfile"), first);
    assert_eq!(hub.log(), vec![]);
    let checked = chatshards(&["lock", "--check", &pipeline_arg], &online);
    assert!(checked.status.success(), "{}", stderr(&checked));

    let fetched = chatshards(&["fetch", &pipeline_arg], &online);
    assert!(fetched.status.success(), "{}", stderr(&fetched));
    assert!(
        stderr(&fetched).ends_with(&format!(
            "Fetched 4 files (2 downloaded, 2 already cached, {}) into `{}`\n",
            indicatif::HumanBytes(500_000),
            cache.display()
        )),
        "{}",
        stderr(&fetched)
    );

    // Offline, with no Hub at all: everything is verified from the cache.
    let offline = [
        ("HF_ENDPOINT", dead_endpoint()),
        ("HF_HUB_CACHE", cache.display().to_string()),
        ("HF_HOME", dir.path().join("home").display().to_string()),
        ("HF_HUB_OFFLINE", "1".to_owned()),
    ];
    let fetched = chatshards(&["fetch", &pipeline_arg], &offline);
    assert!(fetched.status.success(), "{}", stderr(&fetched));
    assert_eq!(
        stderr(&fetched),
        format!(
            "Fetched 4 files (0 downloaded, 4 already cached, 0 B) into `{}`\n",
            cache.display()
        )
    );

    // The pipeline changes: fetch and `lock --check` refuse the stale lockfile.
    write_pipeline(&pipeline, "[\"*.parquet\", README.md]");
    let stale = format!(
        "error: the lockfile `{}` is out of date:\n  - dataset `{DATASET}` at `main`: files changed from \
         [`*.parquet`] to [`*.parquet`, `README.md`]\n\nhint: run `chatshards lock {pipeline_arg}` to update the lockfile\n",
        lock_path.display()
    );
    for args in [
        vec!["fetch", &pipeline_arg],
        vec!["lock", "--check", &pipeline_arg],
    ] {
        let refused = chatshards(&args, &offline);
        assert_eq!(refused.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&refused), stale, "{args:?}");
    }
    // Relocking resolves only the entry that changed.
    let relocked = chatshards(&["lock", &pipeline_arg], &online);
    assert!(relocked.status.success(), "{}", stderr(&relocked));
    assert_eq!(
        stderr(&relocked),
        format!(
            "Downloaded dataset {DATASET}/README.md (11 B)\n\
             Locked dataset `{DATASET}` at `main` to `111111111111` (3 files)\n\
             Wrote `{}` (2 repos, 5 Hub files, 0 local files)\n",
            lock_path.display()
        )
    );
}

/// `lock` then `build --locked` reads tokenizer, template and source rows from the Hub cache
/// with the endpoint unreachable; the manifest names the pinned commits; without the cached
/// files, `--locked` fails and says to fetch.
#[test]
fn build_locked_reads_hub_inputs_from_the_cache_without_network() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read(root.join(p)).expect("repo asset");
    let rows: Vec<u8> = std::fs::read_to_string(root.join("tests/fixtures/demo/chat.jsonl"))
        .expect("demo rows")
        .lines()
        .take(10)
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect();
    let model = FakeRepo::model("acme/qwen").commit(
        "main",
        &"c".repeat(40),
        vec![
            FakeFile::new(
                "tokenizer.json.zst",
                read("templates/qwen3.6/tokenizer.json.zst"),
                true,
            ),
            FakeFile::new(
                "chat_template.jinja",
                read("templates/qwen3.6/chat_template.jinja"),
                false,
            ),
        ],
    );
    let data = FakeRepo::dataset("acme/rows").commit(
        "main",
        &"d".repeat(40),
        vec![FakeFile::new("train/part-0.jsonl", rows, true)],
    );
    let hub = FakeHub::start(vec![model, data], 100);
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let pipeline = dir.path().join("p.yaml");
    std::fs::write(
        &pipeline,
        "name: hub\ntokenizer:\n  hub: {repo: acme/qwen, files: [tokenizer.json.zst]}\n\
         template:\n  hub: {repo: acme/qwen, files: [chat_template.jinja]}\n\
         min_supervised_tokens: 8\n\
         sources:\n  - name: rows\n    hub: {repo: acme/rows, files: [\"train/*.jsonl\"]}\n    format: openai\n\
         output:\n  dir: out\n",
    )
    .expect("pipeline");
    let p = pipeline.display().to_string();
    let env = |endpoint: String| {
        vec![
            ("HF_ENDPOINT", endpoint),
            ("HF_HUB_CACHE", cache.display().to_string()),
            ("HF_HOME", dir.path().join("home").display().to_string()),
        ]
    };
    let locked = chatshards(&["lock", &p], &env(hub.url()));
    assert!(locked.status.success(), "{}", stderr(&locked));
    let fetched = chatshards(&["fetch", &p], &env(hub.url()));
    assert!(fetched.status.success(), "{}", stderr(&fetched));

    let built = chatshards(&["build", "--locked", &p], &env(dead_endpoint()));
    assert!(built.status.success(), "{}", stderr(&built));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("out/manifest.json")).expect("manifest"),
    )
    .expect("json");
    let commits: Vec<&str> = manifest["inputs"]["hub"]
        .as_array()
        .expect("hub inputs")
        .iter()
        .map(|f| f["commit"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        commits,
        vec!["c".repeat(40), "c".repeat(40), "d".repeat(40)]
    );
    assert_eq!(
        manifest["inputs"]["files"][0]["path"],
        format!(
            "hf://datasets/acme/rows@{}/train/part-0.jsonl",
            "d".repeat(40)
        )
    );
    assert_eq!(manifest["sources"]["rows"]["read"], 10);

    std::fs::remove_dir_all(&cache).expect("clear cache");
    let failed = chatshards(&["build", "--locked", &p], &env(dead_endpoint()));
    assert!(!failed.status.success());
    assert!(
        stderr(&failed).contains("chatshards fetch"),
        "{}",
        stderr(&failed)
    );
}
