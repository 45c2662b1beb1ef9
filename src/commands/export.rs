//! `chatshards export --format specforge DIR`: the dataset's kept conversations
//! (`conversations.jsonl`, normalized ShareGPT) in the shape SpecForge's data loader reads: one
//! JSON line `{"id", "conversations": [{"role", "content", "reasoning_content"?, "tool_calls"?,
//! "tool_call_id"?, "name"?}], "tools": [...]}` (SpecForge's `safe_conversations_generator`
//! keeps `conversations` and `tools`; its parsers read `role`/`content`, `tool_calls` with
//! object or string arguments, and pass the rest to the chat template).
//!
//! Messages are the ones the build rendered, in the OpenAI shape the build hands the template
//! (`Conversation::to_template_messages`), so SpecForge's `apply_chat_template` of them is the
//! text chatshards rendered.

use crate::adapt::{Adapter, Repairs, ShareGptAdapter};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    /// SpecForge's role/content conversations JSONL.
    Specforge,
}

pub struct ExportArgs {
    pub dir: PathBuf,
    pub format: ExportFormat,
    /// Write here (a new file) instead of stdout.
    pub out: Option<PathBuf>,
}

/// One `conversations.jsonl` line as a SpecForge line.
pub fn specforge_line(line: &str) -> Result<Value, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let conversation = Adapter::ShareGpt(ShareGptAdapter::default())
        .adapt(&value, &mut Repairs::new())
        .map_err(|r| r.message)?;
    Ok(json!({
        "id": value.get("id").cloned().unwrap_or(Value::Null),
        "conversations": conversation.to_template_messages(),
        "tools": conversation.tools,
    }))
}

pub fn run(args: &ExportArgs) -> Result<usize> {
    let ExportFormat::Specforge = args.format;
    let input = args.dir.join("conversations.jsonl");
    let file = std::fs::File::open(&input).with_context(|| {
        format!(
            "failed to open `{}`: is `{}` a chatshards dataset?",
            input.display(),
            args.dir.display()
        )
    })?;
    let writer: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(new_file(path)?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::new(writer);
    let mut count = 0;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("failed to read `{}`", input.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = specforge_line(&line)
            .map_err(|e| anyhow::anyhow!("`{}` line {}: {e}", input.display(), i + 1))?;
        serde_json::to_writer(&mut out, &record).context("failed to write the export")?;
        out.write_all(b"\n").context("failed to write the export")?;
        count += 1;
    }
    out.flush().context("failed to write the export")?;
    Ok(count)
}

/// A new file: an existing one is never replaced.
fn new_file(path: &Path) -> Result<std::fs::File> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            bail!("`{}` exists; refusing to replace it", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("failed to create `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharegpt_records_become_role_content_with_reasoning_calls_and_tools() {
        let line = r#"{"id":"chat:3","source":"chat","system":"Be brief.","tools":"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]","conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"","reasoning_content":"think"},{"from":"function_call","value":"[{\"name\":\"f\",\"arguments\":{\"x\":1}}]"},{"from":"observation","value":"2","tool_call_id":"c1"},{"from":"gpt","value":"done"}]}"#;
        let v = specforge_line(line).expect("line");
        assert_eq!(v["id"], "chat:3");
        assert_eq!(
            v["tools"],
            json!([{"type": "function", "function": {"name": "f", "parameters": {}}}])
        );
        assert_eq!(
            v["conversations"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "reasoning_content": "think",
                 "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
                {"role": "tool", "content": "2", "tool_call_id": "c1"},
                {"role": "assistant", "content": "done"},
            ])
        );
        assert!(specforge_line("{").is_err());
    }
}
