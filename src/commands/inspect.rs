//! `chatshards inspect DIR --row N`: one row decoded, supervised tokens highlighted.

use crate::printer::Printer;
use crate::tokenize::Tokenizer;
use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use std::io::IsTerminal;
use std::path::Path;

pub fn run(dir: &Path, row: u64, tokenizer: &Path) -> Result<()> {
    let tokenizer = Tokenizer::load(tokenizer)?;
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).with_context(|| {
            format!(
                "`{}` is not a dataset directory (no state.json)",
                dir.display()
            )
        })?)
        .context("state.json is not valid JSON")?;
    let files: Vec<String> = state["_data_files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["filename"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut skip = row;
    for file in &files {
        let path = dir.join(file);
        let f = std::fs::File::open(&path)
            .with_context(|| format!("failed to open `{}`", path.display()))?;
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(f), None)
            .with_context(|| format!("`{}` is not an Arrow stream", path.display()))?;
        for batch in reader {
            let batch = batch.with_context(|| format!("failed to read `{}`", path.display()))?;
            let n = batch.num_rows() as u64;
            if skip >= n {
                skip -= n;
                continue;
            }
            let i = skip as usize;
            let column = |name: &str| {
                batch
                    .column_by_name(name)
                    .with_context(|| format!("`{}` has no `{name}` column", path.display()))
            };
            let ids_list = column("input_ids")?.as_list::<i32>().value(i);
            let mask_list = column("loss_mask")?.as_list::<i32>().value(i);
            let ids: Vec<u32> = ids_list
                .as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&x| x as u32)
                .collect();
            let mask: Vec<i8> = mask_list.as_primitive::<Int8Type>().values().to_vec();
            let sample_id = column("sample_id")?.as_string::<i32>().value(i).to_owned();
            let source = column("source")?.as_string::<i32>().value(i).to_owned();
            let supervised = mask.iter().filter(|&&m| m == 1).count();
            let mut text = format!(
                "row {row}  sample_id {sample_id}  source {source}  seq_len {}  supervised {supervised}\n\n",
                ids.len()
            );
            text.push_str(&highlight(
                &tokenizer,
                &ids,
                &mask,
                std::io::stdout().is_terminal(),
            ));
            text.push('\n');
            Printer::data(&mut std::io::stdout().lock(), &text)
                .context("failed to write stdout")?;
            return Ok(());
        }
    }
    bail!(
        "row {row} is past the end of the dataset ({} rows)",
        row - skip
    )
}

/// Decodes ids, marking supervised runs with color on a terminal and `⟦…⟧` otherwise.
fn highlight(tokenizer: &Tokenizer, ids: &[u32], mask: &[i8], color: bool) -> String {
    let (open, close) = if color {
        ("\x1b[32m", "\x1b[0m")
    } else {
        ("⟦", "⟧")
    };
    let mut out = String::new();
    let mut start = 0;
    while start < ids.len() {
        let m = mask[start];
        let end = (start..ids.len())
            .find(|&j| mask[j] != m)
            .unwrap_or(ids.len());
        let text = String::from_utf8_lossy(&tokenizer.decode_bytes(&ids[start..end])).into_owned();
        if m == 1 {
            out.push_str(open);
            out.push_str(&text);
            out.push_str(close);
        } else {
            out.push_str(&text);
        }
        start = end;
    }
    out
}
