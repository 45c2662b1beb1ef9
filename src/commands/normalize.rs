//! `chatshards normalize --format NAME FILE`: one source file through read → adapt → validate,
//! printed as normalized ShareGPT JSONL (the same records a build writes to
//! `conversations.jsonl`) on stdout. Each row that yields nothing is a JSON line on stderr (or
//! in `--rejects FILE`): `{"row", "reason", "message"}` for a reject, `{"row", "filtered"}` for
//! a row an adapter option leaves out. A one-line summary follows on stderr.
//!
//! Records are `{"id": "<format>:0:<row>", "source": "<format>", ..., "meta"?}`: the id has
//! the shape of a build's `sample_id` with the format name as the source name, and `meta`
//! holds the source labels the adapter reports (OpenOrca's submix, xLAM's id, ...).

use crate::adapt::{to_sharegpt_record, Repairs};
use crate::plan::config::{ColumnsConfig, FormatName, TagsConfig};
use crate::plan::FormatOptions;
use crate::printer::Printer;
use crate::read::read_files;
use crate::reject::Skip;
use crate::validate::Validator;
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

pub struct NormalizeArgs {
    pub format: String,
    pub file: PathBuf,
    /// `None`: the built-in Qwen3.6 tokenizer.
    pub tokenizer: Option<PathBuf>,
    pub rejects: Option<PathBuf>,
    pub resolved_only: bool,
    /// The source's `columns:` and `tags:` mappings, as YAML (flow style on the command line).
    pub columns: Option<String>,
    pub tags: Option<String>,
}

/// A `--columns` / `--tags` value, parsed as the pipeline's key of that name.
fn mapping<T: serde::de::DeserializeOwned + Default>(
    option: &str,
    yaml: Option<&str>,
) -> Result<T> {
    match yaml {
        None => Ok(T::default()),
        Some(text) => {
            serde_yaml_ng::from_str(text).map_err(|e| anyhow!("--{option} `{text}`: {e}"))
        }
    }
}

pub fn run(args: &NormalizeArgs, printer: &Printer) -> Result<()> {
    let format: FormatName = serde_json::from_value(Value::String(args.format.clone()))
        .map_err(|e| anyhow!("unknown format `{}`: {e}", args.format))?;
    let options = FormatOptions {
        resolved_only: args.resolved_only.then_some(true),
    };
    let columns: ColumnsConfig = mapping("columns", args.columns.as_deref())?;
    let tags: TagsConfig = mapping("tags", args.tags.as_deref())?;
    let adapter = crate::plan::adapter(format, &columns, &tags, &options)
        .map_err(|errors| anyhow!("{}", errors.join("; ")))?;
    // The same control-token list a build rejects on.
    let tokenizer = crate::tokenize::shipped::tokenizer(args.tokenizer.as_deref())?;
    let validator = Validator::new(&tokenizer.forbidden);
    let name = adapter.name();

    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut side: Box<dyn Write> = match &args.rejects {
        Some(path) => Box::new(BufWriter::new(
            crate::model::nofollow::create(path)
                .with_context(|| format!("failed to create `{}`", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stderr().lock())),
    };
    let (mut read, mut kept, mut rejected, mut filtered) = (0u64, 0u64, 0u64, 0u64);
    let mut failure = None;
    read_files(std::slice::from_ref(&args.file), &mut |raw| {
        read += 1;
        let (row, shown) = (raw.row, raw.shown_row());
        let result = raw.into_value().and_then(|value| {
            let mut repairs = Repairs::new();
            let conversation = adapter.prepare(&value, &mut repairs)?;
            let conversation = validator.validate(conversation, &mut repairs)?;
            Ok((value, conversation))
        });
        let written = match result {
            Ok((value, conversation)) => {
                kept += 1;
                let id = format!("{name}:0:{}", row);
                let mut record = to_sharegpt_record(&conversation, &id, name);
                let meta = adapter.metadata(&value);
                record.meta = (!meta.is_empty()).then_some(meta);
                line(&mut out, &record)
            }
            Err(Skip::Rejected(reject)) => {
                rejected += 1;
                let record = json!({"row": shown, "reason": reject.reason.code(), "message": reject.message});
                line(&mut side, &record)
            }
            Err(Skip::Filtered(reason)) => {
                filtered += 1;
                line(&mut side, &json!({"row": shown, "filtered": reason.code()}))
            }
        };
        match written {
            Ok(()) => true,
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e).context("failed to write output");
    }
    out.flush().context("failed to write stdout")?;
    side.flush().context("failed to write rejects")?;
    drop(side);
    printer.info(&format!(
        "normalize: {read} rows read from `{}`: {kept} kept, {rejected} rejected, {filtered} filtered",
        args.file.display()
    ));
    Ok(())
}

fn line(mut w: &mut dyn Write, value: &impl serde::Serialize) -> std::io::Result<()> {
    // Plain strings and JSON values: serializing cannot fail.
    let mut s = serde_json::to_string(value).unwrap_or_default();
    s.push('\n');
    Printer::data(&mut w, &s)
}
