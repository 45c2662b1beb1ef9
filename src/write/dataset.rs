//! `dataset_info.json` and `state.json`, exactly as `datasets.save_to_disk` lays them out.

use crate::tokenize::mask_config::MaskDtype;
use serde_json::{json, Value};

pub use crate::model::digest::pretty;

/// The features matching [`super::schema`] column for column.
pub fn features(mask: MaskDtype) -> Value {
    let mask = match mask {
        MaskDtype::Int8 => "int8",
        MaskDtype::Bool => "bool",
    };
    json!({
        "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "List"},
        "loss_mask": {"feature": {"dtype": mask, "_type": "Value"}, "_type": "List"},
        "seq_len": {"dtype": "int64", "_type": "Value"},
        "sample_id": {"dtype": "string", "_type": "Value"},
        "source": {"dtype": "string", "_type": "Value"}
    })
}

pub fn dataset_info_json(description: &str, mask: MaskDtype) -> String {
    let info = json!({
        "citation": "",
        "description": description,
        "features": features(mask),
        "homepage": "",
        "license": ""
    });
    pretty(&info)
}

/// `state.json`: all seven keys `load_from_disk` reads. `_format_type: "torch"` is what the
/// speculators trainer and hidden-state extractor need.
pub fn state_json(files: &[String], fingerprint: &str) -> String {
    let state = json!({
        "_data_files": files.iter().map(|f| json!({"filename": f})).collect::<Vec<_>>(),
        "_fingerprint": fingerprint,
        "_format_columns": null,
        "_format_kwargs": {},
        "_format_type": "torch",
        "_output_all_columns": false,
        "_split": null
    });
    pretty(&state)
}

/// The name of shard `index` of `count`: `data-00000-of-0000N.arrow`.
pub fn shard_name(index: usize, count: usize) -> String {
    format!("data-{index:05}-of-{count:05}.arrow")
}

/// The folder of the validation rows' own dataset (`output.validation`): its shards, and a
/// `state.json` and `dataset_info.json` listing them, so that `load_from_disk(OUT/validation)`
/// gives the validation split. The output directory's `state.json` lists the same shards as
/// `validation/data-…` after the training shards: one copy of the bytes, two datasets.
pub const VALIDATION_DIR: &str = "validation";

/// The files of [`VALIDATION_DIR`] besides its shards.
pub const VALIDATION_FILES: &[&str] = &["validation/state.json", "validation/dataset_info.json"];
