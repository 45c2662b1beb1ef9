//! A loopback stand-in for the Hugging Face Hub: the endpoints `hf-hub`, `chatshards` and
//! Python `huggingface_hub` use to resolve revisions, list files and download them, serving
//! fixture repos from memory, with faults that tests switch on.
//!
//! Endpoints (as the real Hub answers them):
//! - `GET  /api/{datasets|models}/{owner}/{name}/revision/{rev}` → `{"id", "sha"}`
//! - `GET  /api/{datasets|models}/{owner}/{name}/tree/{rev}?recursive=true` → entries, paginated
//!   with a `Link: <…>; rel="next"` header
//! - `HEAD|GET /[datasets/]{owner}/{name}/resolve/{rev}/{path}` → the file (`ETag` = git blob
//!   id), or for LFS files a 302 to `/cdn/{sha256}` carrying `X-Linked-Etag` / `X-Linked-Size`
//! - `HEAD|GET /cdn/{sha256}` → LFS content, with `Range` support
//!
//! Errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`,
//! `GatedRepo`) like the Hub's. Every connection serves one request and closes.

use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A file in a fixture repo.
#[derive(Debug, Clone)]
pub struct FakeFile {
    pub path: String,
    pub bytes: Vec<u8>,
    /// Stored in LFS: listed with an `lfs` block, served through the CDN redirect.
    pub lfs: bool,
}

impl FakeFile {
    pub fn new(path: &str, bytes: Vec<u8>, lfs: bool) -> Self {
        FakeFile {
            path: path.to_owned(),
            bytes,
            lfs,
        }
    }

    pub fn sha256(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }

    /// `git hash-object` of the content.
    pub fn git_oid(&self) -> String {
        git_oid(&self.bytes)
    }

    fn lfs_pointer(&self) -> Vec<u8> {
        format!(
            "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
            self.sha256(),
            self.bytes.len()
        )
        .into_bytes()
    }

    /// What the Hub lists as `oid`: the git blob id of what git stores (the pointer, for LFS).
    fn tree_oid(&self) -> String {
        if self.lfs {
            git_oid(&self.lfs_pointer())
        } else {
            self.git_oid()
        }
    }

    /// The blob name in the cache: the LFS SHA-256, or the git blob id.
    pub fn etag(&self) -> String {
        if self.lfs {
            self.sha256()
        } else {
            self.git_oid()
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn git_oid(bytes: &[u8]) -> String {
    let mut sha1 = Sha1::new();
    sha1.update(format!("blob {}\0", bytes.len()).as_bytes());
    sha1.update(bytes);
    hex(&sha1.finalize())
}

pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Deterministic filler bytes (xorshift), so fixtures are reproducible without shipping data.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A fixture repo: branches pointing at commits, each commit a list of files.
#[derive(Debug, Clone)]
pub struct FakeRepo {
    /// `datasets` or `models`.
    pub plural: &'static str,
    pub id: String,
    pub branches: BTreeMap<String, String>,
    pub commits: BTreeMap<String, Vec<FakeFile>>,
}

impl FakeRepo {
    pub fn dataset(id: &str) -> Self {
        Self::new("datasets", id)
    }

    pub fn model(id: &str) -> Self {
        Self::new("models", id)
    }

    fn new(plural: &'static str, id: &str) -> Self {
        FakeRepo {
            plural,
            id: id.to_owned(),
            branches: BTreeMap::new(),
            commits: BTreeMap::new(),
        }
    }

    /// Adds a commit and points `branch` at it.
    pub fn commit(mut self, branch: &str, commit: &str, files: Vec<FakeFile>) -> Self {
        self.commits.insert(commit.to_owned(), files);
        self.branches.insert(branch.to_owned(), commit.to_owned());
        self
    }

    fn resolve(&self, revision: &str) -> Option<(&str, &[FakeFile])> {
        let commit = self
            .branches
            .get(revision)
            .map(String::as_str)
            .unwrap_or(revision);
        self.commits
            .get_key_value(commit)
            .map(|(commit, files)| (commit.as_str(), files.as_slice()))
    }
}

/// How a file's content responses are cut short.
#[derive(Debug, Clone, Copy)]
pub struct Truncate {
    /// Bytes (absolute offset) after which the body stops; resumed requests starting at or past
    /// this offset get an empty body.
    pub at: usize,
    /// How many responses are cut before the file is served whole.
    pub times: usize,
}

/// Faults, switched on per test.
#[derive(Debug, Default)]
pub struct Faults {
    /// The next N `/api/` requests answer 500.
    pub fail_api: usize,
    /// Path → the next N content GETs answer 500.
    pub fail_content: HashMap<String, usize>,
    pub truncate: HashMap<String, Truncate>,
    /// Paths served with one byte flipped (same length).
    pub corrupt: HashSet<String>,
    /// Repo ids that answer 401 (no token) / 403 (token) with `X-Error-Code: GatedRepo`.
    pub gated: HashSet<String>,
    /// Sleep this long before answering `/api/` requests.
    pub delay_api: Option<Duration>,
    /// Path → (bytes, pause): the next content GET sends that many bytes, then goes quiet.
    pub stall: HashMap<String, (usize, Duration)>,
    /// Quote the request's `Authorization` header in error messages (a careless proxy).
    pub echo_auth: bool,
}

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    /// Decoded path with the query string.
    pub target: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct State {
    repos: Mutex<Vec<FakeRepo>>,
    faults: Mutex<Faults>,
    log: Mutex<Vec<Logged>>,
    page_size: usize,
    base: String,
    cdn: String,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct FakeHub {
    pub addr: SocketAddr,
    cdn_addr: SocketAddr,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
}

impl FakeHub {
    /// Serves `repos` on `127.0.0.1:<free port>`; tree listings come `page_size` entries a page.
    pub fn start(repos: Vec<FakeRepo>, page_size: usize) -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        // LFS content lives on another origin, like the Hub's CDN: clients must not follow the
        // redirect when they want the metadata, and must not forward the token.
        let cdn = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let cdn_addr = cdn.local_addr().expect("local addr");
        let state = Arc::new(State {
            repos: Mutex::new(repos),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
            page_size,
            base: format!("http://{addr}"),
            cdn: format!("http://{cdn_addr}"),
        });
        let stop = Arc::new(AtomicBool::new(false));
        for listener in [listener, cdn] {
            let (accept_state, accept_stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if accept_stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let state = accept_state.clone();
                    std::thread::spawn(move || {
                        let _ = serve(stream, &state);
                    });
                }
            });
        }
        FakeHub {
            addr,
            cdn_addr,
            state,
            stop,
        }
    }

    pub fn url(&self) -> String {
        self.state.base.clone()
    }

    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        lock(&self.state.faults)
    }

    pub fn repos(&self) -> MutexGuard<'_, Vec<FakeRepo>> {
        lock(&self.state.repos)
    }

    pub fn log(&self) -> Vec<Logged> {
        lock(&self.state.log).clone()
    }

    pub fn clear_log(&self) {
        lock(&self.state.log).clear();
    }

    /// Content requests (GETs of file bytes) in the log.
    pub fn content_gets(&self) -> Vec<Logged> {
        self.log()
            .into_iter()
            .filter(|r| {
                r.method == "GET"
                    && (r.target.contains("/resolve/") || r.target.starts_with("/cdn/"))
            })
            .collect()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loops so they see the flag.
        let _ = TcpStream::connect(self.addr);
        let _ = TcpStream::connect(self.cdn_addr);
    }
}

/// A free loopback port with nothing listening: connections are refused at once.
pub fn dead_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
}

fn read_request(stream: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    if let Some(length) = headers
        .get("content-length")
        .and_then(|length| length.parse::<u64>().ok())
    {
        let mut body = Vec::new();
        reader.by_ref().take(length).read_to_end(&mut body)?;
    }
    Ok(Request {
        method,
        target,
        headers,
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes (after the headers promise them all), then close.
    cut_at: Option<usize>,
    /// Pause after sending this many bytes.
    stall: Option<(usize, Duration)>,
}

impl Response {
    fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            cut_at: None,
            stall: None,
        }
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    fn json(self, value: &serde_json::Value) -> Self {
        let mut response = self.header("Content-Type", "application/json");
        response.body = value.to_string().into_bytes();
        response
    }

    fn error(status: u16, code: &str, message: &str) -> Self {
        Response::new(status)
            .header("X-Error-Code", code)
            .header("X-Error-Message", message)
            .json(&serde_json::json!({ "error": message }))
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Internal Server Error",
    }
}

fn serve(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request = read_request(&stream)?;
    if request.method.is_empty() {
        return Ok(());
    }
    lock(&state.log).push(Logged {
        method: request.method.clone(),
        target: percent_decode(&request.target),
        range: request.headers.get("range").cloned(),
        authorization: request.headers.get("authorization").cloned(),
    });
    let response = route(&request, state);
    let head = request.method == "HEAD";
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    let mut has_length = false;
    for (name, value) in &response.headers {
        has_length |= name.eq_ignore_ascii_case("content-length");
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !has_length {
        out.push_str(&format!("Content-Length: {}\r\n", response.body.len()));
    }
    out.push_str("Connection: close\r\n\r\n");
    stream.write_all(out.as_bytes())?;
    if head {
        return stream.flush();
    }
    let body = match response.cut_at {
        Some(cut) => &response.body[..cut.min(response.body.len())],
        None => &response.body[..],
    };
    match response.stall {
        Some((after, pause)) => {
            let after = after.min(body.len());
            stream.write_all(&body[..after])?;
            stream.flush()?;
            std::thread::sleep(pause);
            stream.write_all(&body[after..])?;
        }
        None => stream.write_all(body)?,
    }
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

fn route(request: &Request, state: &State) -> Response {
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let authorization = request.headers.get("authorization").cloned();

    if segments.first() == Some(&"api") {
        let (delay, fail) = {
            let mut faults = lock(&state.faults);
            let fail = faults.fail_api > 0;
            if fail {
                faults.fail_api -= 1;
            }
            (faults.delay_api, fail)
        };
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        if fail {
            return Response::error(500, "InternalError", "simulated server error");
        }
        return match segments.as_slice() {
            ["api", plural, owner, name, "revision", revision @ ..] => {
                let id = format!("{owner}/{name}");
                with_repo(
                    state,
                    plural,
                    &id,
                    authorization.as_deref(),
                    |repo| match repo.resolve(&revision.join("/")) {
                        Some((commit, _)) => Response::new(200).json(
                            &serde_json::json!({ "id": repo.id, "sha": commit, "private": false }),
                        ),
                        None => revision_missing(&revision.join("/")),
                    },
                )
            }
            ["api", plural, owner, name, "tree", revision, ..] => {
                let id = format!("{owner}/{name}");
                let cursor: usize = query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("cursor="))
                    .and_then(|cursor| cursor.parse().ok())
                    .unwrap_or(0);
                with_repo(
                    state,
                    plural,
                    &id,
                    authorization.as_deref(),
                    |repo| match repo.resolve(revision) {
                        Some((_, files)) => tree_page(state, path, files, cursor),
                        None => revision_missing(revision),
                    },
                )
            }
            _ => Response::error(404, "NotFound", "no such API route"),
        };
    }

    if let ["cdn", sha256] = segments.as_slice() {
        let repos = lock(&state.repos);
        let file = repos
            .iter()
            .flat_map(|repo| repo.commits.values().flatten())
            .find(|file| file.lfs && file.sha256() == *sha256)
            .cloned();
        drop(repos);
        return match file {
            Some(file) => content(
                state,
                &request.method,
                &file,
                request.headers.get("range"),
                Response::new(200).header("ETag", format!("\"cdn-{}\"", &file.sha256()[..16])),
            ),
            None => Response::error(404, "NotFound", "no such object"),
        };
    }

    let (plural, rest) = match segments.first() {
        Some(&"datasets") => ("datasets", &segments[1..]),
        _ => ("models", &segments[..]),
    };
    if let [owner, name, "resolve", revision, file_path @ ..] = rest {
        let id = format!("{owner}/{name}");
        let file_path = file_path.join("/");
        return with_repo(state, plural, &id, authorization.as_deref(), |repo| {
            let Some((commit, files)) = repo.resolve(revision) else {
                return revision_missing(revision);
            };
            let Some(file) = files.iter().find(|file| file.path == file_path) else {
                return Response::error(
                    404,
                    "EntryNotFound",
                    &format!("{file_path} does not exist"),
                )
                .header("X-Repo-Commit", commit);
            };
            if file.lfs {
                let size = file.bytes.len().to_string();
                return Response::new(302)
                    .header("Location", format!("{}/cdn/{}", state.cdn, file.sha256()))
                    .header("X-Repo-Commit", commit)
                    .header("X-Linked-Etag", format!("\"{}\"", file.sha256()))
                    .header("X-Linked-Size", size)
                    .header("ETag", format!("W/\"{}\"", file.tree_oid()));
            }
            let base = Response::new(200)
                .header("ETag", format!("\"{}\"", file.git_oid()))
                .header("X-Repo-Commit", commit);
            content(
                state,
                &request.method,
                file,
                request.headers.get("range"),
                base,
            )
        });
    }
    Response::error(404, "NotFound", "no such route")
}

fn revision_missing(revision: &str) -> Response {
    Response::error(
        404,
        "RevisionNotFound",
        &format!("Invalid rev id: {revision}"),
    )
}

fn with_repo(
    state: &State,
    plural: &str,
    id: &str,
    authorization: Option<&str>,
    answer: impl FnOnce(&FakeRepo) -> Response,
) -> Response {
    let faults = lock(&state.faults);
    if faults.gated.contains(id) {
        let kind = if plural == "datasets" {
            "dataset"
        } else {
            "model"
        };
        let mut message = format!(
            "Access to {kind} {id} is restricted. You must have access to it and be authenticated to access it. Please log in."
        );
        if faults.echo_auth {
            if let Some(authorization) = authorization {
                message.push_str(&format!(" (sent: {authorization})"));
            }
        }
        let status = if authorization.is_some() { 403 } else { 401 };
        return Response::error(status, "GatedRepo", &message);
    }
    drop(faults);
    let repos = lock(&state.repos);
    match repos
        .iter()
        .find(|repo| repo.plural == plural && repo.id == id)
    {
        Some(repo) => answer(repo),
        None => Response::error(401, "RepoNotFound", "Repository not found"),
    }
}

fn tree_page(state: &State, path: &str, files: &[FakeFile], cursor: usize) -> Response {
    let mut entries: Vec<serde_json::Value> = Vec::new();
    let mut directories: Vec<String> = files
        .iter()
        .filter_map(|file| file.path.rsplit_once('/').map(|(dir, _)| dir.to_owned()))
        .collect();
    directories.sort();
    directories.dedup();
    for directory in directories {
        entries.push(serde_json::json!({ "type": "directory", "oid": git_oid(directory.as_bytes()), "path": directory }));
    }
    for file in files {
        let mut entry = serde_json::json!({
            "type": "file",
            "oid": file.tree_oid(),
            "size": file.bytes.len(),
            "path": file.path,
        });
        if file.lfs {
            entry["lfs"] = serde_json::json!({
                "oid": file.sha256(),
                "size": file.bytes.len(),
                "pointerSize": file.lfs_pointer().len(),
            });
        }
        entries.push(entry);
    }
    let end = (cursor + state.page_size).min(entries.len());
    let page: Vec<serde_json::Value> = entries[cursor.min(end)..end].to_vec();
    let mut response = Response::new(200).json(&serde_json::Value::Array(page));
    if end < entries.len() {
        response = response.header(
            "Link",
            format!(
                "<{}{}?recursive=true&cursor={end}>; rel=\"next\"",
                state.base, path
            ),
        );
    }
    response
}

/// The bytes of `file` (all, or the requested range), with the file's faults applied.
fn content(
    state: &State,
    method: &str,
    file: &FakeFile,
    range: Option<&String>,
    base: Response,
) -> Response {
    let mut bytes = file.bytes.clone();
    let (start, end) = match range.and_then(|range| range.strip_prefix("bytes=")) {
        Some(spec) => {
            let (from, to) = spec.split_once('-').unwrap_or((spec, ""));
            let from: usize = from.parse().unwrap_or(0);
            let to: usize = to.parse().map(|to: usize| to + 1).unwrap_or(bytes.len());
            (from, to.min(bytes.len()))
        }
        None => (0, bytes.len()),
    };
    if start >= bytes.len() || start >= end {
        return Response::new(416).header("Content-Range", format!("bytes */{}", bytes.len()));
    }
    let mut response = base;
    if method == "GET" {
        let mut faults = lock(&state.faults);
        if let Some(count) = faults.fail_content.get_mut(&file.path) {
            if *count > 0 {
                *count -= 1;
                return Response::error(500, "InternalError", "simulated server error");
            }
        }
        if faults.corrupt.contains(&file.path) {
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
        }
        if let Some(truncate) = faults.truncate.get_mut(&file.path) {
            if truncate.times > 0 {
                truncate.times -= 1;
                response.cut_at = Some(truncate.at.saturating_sub(start));
            }
        }
        if let Some(stall) = faults.stall.remove(&file.path) {
            response.stall = Some(stall);
        }
    }
    let partial = start > 0 || end < bytes.len();
    response.status = if partial { 206 } else { 200 };
    if partial {
        response = response.header(
            "Content-Range",
            format!("bytes {start}-{}/{}", end - 1, bytes.len()),
        );
    }
    response.body = bytes[start..end].to_vec();
    response
        .header("Accept-Ranges", "bytes")
        .header("Content-Length", (end - start).to_string())
}
