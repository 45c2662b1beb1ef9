//! The Qwen3.6 tokenizer and chat template built into the binary: what a pipeline without
//! `tokenizer:` or `template:` uses, and the tokenizer of `render`, `serve-render`,
//! `normalize` and `inspect` without `--tokenizer`. Their bytes are those of the repository's
//! `templates/qwen3.6/` files, so a build's identity is the same as with those paths.

/// The name recorded for them (manifest `inputs`, lockfile `embedded`).
pub const NAME: &str = "qwen3.6";

/// `templates/qwen3.6/tokenizer.json.zst` (3.8 MB compressed; its SHA-256 is the build's
/// `tokenizer_sha256`, as when the path is given).
pub const TOKENIZER_ZST: &[u8] = include_bytes!("../../templates/qwen3.6/tokenizer.json.zst");

/// `templates/qwen3.6/chat_template.jinja`.
pub const TEMPLATE: &str = include_str!("../../templates/qwen3.6/chat_template.jinja");

/// How the built-in files are named in messages.
pub const TOKENIZER_SHOWN: &str = "the built-in Qwen3.6 tokenizer";
pub const TEMPLATE_SHOWN: &str = "the built-in Qwen3.6 chat template";
