//! The official Qwen3.5 and Qwen3.6 chat templates, evaluated natively for a [`Conversation`].
//!
//! Rendering these templates with minijinja costs more than everything else a row needs except
//! tokenizing. This is the same template logic written out in Rust for the inputs a
//! `Conversation` can hold (string content, object arguments, no images). It is used only for
//! template files whose SHA-256 is one of the two below, and only for rows the template renders
//! without raising: for anything else it answers `None` and minijinja renders the row, so
//! errors are always the template's own. `tests/native_render.rs` proves it byte-identical to
//! minijinja (itself proven against transformers by the goldens), and builds re-render a share
//! of rows with minijinja and stop on any difference.

use super::pycompat;
use crate::conversation::{py_trim, Conversation, Role};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};

/// SHA-256 of `templates/qwen3.6/chat_template.jinja` (`Qwen/Qwen3.6-27B`).
const QWEN36_SHA256: &str = "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259";
/// SHA-256 of `templates/qwen3.5/chat_template.jinja` (`Qwen/Qwen3.5-9B` and siblings).
const QWEN35_SHA256: &str = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715";

/// The tool-calling instructions both templates append after the `<tools>` block.
const TOOL_INSTRUCTIONS: &str = "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Qwen35,
    Qwen36,
}

/// A native renderer for one of the supported template files.
#[derive(Debug, Clone)]
pub(super) struct Native {
    variant: Variant,
    /// Qwen3.6's `preserve_thinking is defined and preserve_thinking is true`.
    preserve_thinking: bool,
}

impl Native {
    /// The native renderer for `source`, if it is a supported template file and every template
    /// variable passed is one whose meaning is known here (any other name could shadow something
    /// the template uses, so such builds stay with minijinja).
    pub(super) fn for_template(source: &str, kwargs: &Map<String, Json>) -> Option<Native> {
        let sha256 = format!("{:x}", Sha256::digest(source.as_bytes()));
        let variant = match sha256.as_str() {
            QWEN36_SHA256 => Variant::Qwen36,
            QWEN35_SHA256 => Variant::Qwen35,
            _ => return None,
        };
        // `enable_thinking` only matters for a generation prompt and `add_vision_id` only for
        // image parts; neither occurs in a training render of a `Conversation`.
        let known = ["enable_thinking", "preserve_thinking", "add_vision_id"];
        if kwargs.keys().any(|k| !known.contains(&k.as_str())) {
            return None;
        }
        Some(Native {
            variant,
            preserve_thinking: variant == Variant::Qwen36
                && kwargs.get("preserve_thinking") == Some(&Json::Bool(true)),
        })
    }

    /// Which template this renders, for the manifest.
    pub(super) fn name(&self) -> &'static str {
        match self.variant {
            Variant::Qwen35 => "qwen3.5",
            Variant::Qwen36 => "qwen3.6",
        }
    }

    /// The template's output for `conversation` without a generation prompt, or `None` where
    /// the template raises (no messages, no user query, a system message after the first).
    pub(super) fn render(&self, conversation: &Conversation) -> Option<String> {
        let messages = &conversation.messages;
        let first = messages.first()?;
        // The reverse scan of `ns.multi_step_tool`: the last user turn that is not only a
        // wrapped tool response.
        let last_query = messages.iter().rposition(|m| {
            m.role == Role::User && {
                let t = py_trim(&m.content);
                !(t.starts_with("<tool_response>") && t.ends_with("</tool_response>"))
            }
        })?;
        let size = messages.iter().map(|m| m.content.len() + 64).sum::<usize>();
        let mut out = String::with_capacity(size + 256);

        if !conversation.tools.is_empty() {
            out.push_str("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
            for tool in &conversation.tools {
                out.push('\n');
                tojson(tool, &mut out)?;
            }
            out.push_str("\n</tools>");
            out.push_str(TOOL_INSTRUCTIONS);
            if first.role == Role::System {
                let content = py_trim(&first.content);
                if !content.is_empty() {
                    out.push_str("\n\n");
                    out.push_str(content);
                }
            }
            out.push_str("<|im_end|>\n");
        } else if first.role == Role::System {
            push_all(
                &mut out,
                &[
                    "<|im_start|>system\n",
                    py_trim(&first.content),
                    "<|im_end|>\n",
                ],
            );
        }

        for (index, message) in messages.iter().enumerate() {
            let content = py_trim(&message.content);
            match message.role {
                Role::System if index > 0 => return None,
                Role::System => {}
                Role::User => push_all(&mut out, &["<|im_start|>user\n", content, "<|im_end|>\n"]),
                Role::Assistant => {
                    let (reasoning, content) = match &message.reasoning {
                        Some(reasoning) => (reasoning.as_str(), content),
                        None => split_think(content),
                    };
                    let reasoning = py_trim(reasoning);
                    if self.preserve_thinking || index > last_query {
                        push_all(
                            &mut out,
                            &[
                                "<|im_start|>assistant\n<think>\n",
                                reasoning,
                                "\n</think>\n\n",
                                content,
                            ],
                        );
                    } else {
                        push_all(&mut out, &["<|im_start|>assistant\n", content]);
                    }
                    for (k, call) in message.tool_calls.iter().enumerate() {
                        out.push_str(match k {
                            0 if !py_trim(content).is_empty() => "\n\n<tool_call>\n<function=",
                            0 => "<tool_call>\n<function=",
                            _ => "\n<tool_call>\n<function=",
                        });
                        push_all(&mut out, &[&call.name, ">\n"]);
                        for (name, value) in &call.arguments {
                            push_all(&mut out, &["<parameter=", name, ">\n"]);
                            self.argument(value, &mut out)?;
                            out.push_str("\n</parameter>\n");
                        }
                        out.push_str("</function>\n</tool_call>");
                    }
                    out.push_str("<|im_end|>\n");
                }
                Role::Tool => {
                    // `loop.previtem` is undefined for the first message: no opener then.
                    if index > 0 && messages[index - 1].role != Role::Tool {
                        out.push_str("<|im_start|>user");
                    }
                    push_all(
                        &mut out,
                        &["\n<tool_response>\n", content, "\n</tool_response>"],
                    );
                    if messages.get(index + 1).is_none_or(|m| m.role != Role::Tool) {
                        out.push_str("<|im_end|>\n");
                    }
                }
            }
        }
        Some(out)
    }

    /// One tool-call argument value: strings as they are; other values as `tojson` (Qwen3.6),
    /// or containers as `tojson` and scalars as Python `str()` (Qwen3.5).
    fn argument(&self, value: &Json, out: &mut String) -> Option<()> {
        match (value, self.variant) {
            (Json::String(s), _) => out.push_str(s),
            (_, Variant::Qwen36) | (Json::Array(_) | Json::Object(_), Variant::Qwen35) => {
                tojson(value, out)?
            }
            (_, Variant::Qwen35) => {
                let value = minijinja::Value::from(minijinja::value::Serde(value));
                out.push_str(pycompat::py_str(&value).as_str()?);
            }
        }
        Some(())
    }
}

/// An assistant turn without `reasoning_content`: the template takes the reasoning from an
/// inline `<think>…</think>` block, Python string methods and all.
fn split_think(content: &str) -> (&str, &str) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let (Some(first_close), Some(last_close)) = (content.find(CLOSE), content.rfind(CLOSE)) else {
        return ("", content);
    };
    // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
    let before = content[..first_close].trim_end_matches('\n');
    let reasoning = match before.rfind(OPEN) {
        Some(open) => &before[open + OPEN.len()..],
        None => before,
    };
    // content.split('</think>')[-1].lstrip('\n')
    let rest = &content[last_close + CLOSE.len()..];
    (
        reasoning.trim_start_matches('\n'),
        rest.trim_start_matches('\n'),
    )
}

/// `tojson` exactly as the minijinja environment defines it (Python `json.dumps`).
fn tojson(value: &Json, out: &mut String) -> Option<()> {
    let value = minijinja::Value::from(minijinja::value::Serde(value));
    pycompat::dump_json(&value, None, 0, out).ok()
}

fn push_all(out: &mut String, parts: &[&str]) {
    for part in parts {
        out.push_str(part);
    }
}
