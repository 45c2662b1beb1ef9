//! Tool listings written into a system prompt by SWE-agent / OpenHands' function-calling
//! converter (the prompts of SWE-smith and similar trajectories):
//!
//! ```text
//! You have access to the following functions:
//!
//! ---- BEGIN FUNCTION #1: bash ----
//! Description: Execute a bash command in the terminal.
//! Parameters:
//!   (1) command (string, required): The bash command to execute.
//! Allowed values: [`a`, `b`]
//! ---- END FUNCTION #1 ----
//!
//! ---- BEGIN FUNCTION #2: submit ----
//! Description: submit your changes
//! No parameters are required for this function.
//! ---- END FUNCTION #2 ----
//!
//! If you choose to call a function ONLY reply in the following format with NO suffix:
//! ... <IMPORTANT> ... </IMPORTANT>
//! ```
//!
//! The listing is parsed back into OpenAI tool objects. A parse is accepted only when the
//! converter's own formatting of the parsed tools reproduces the listing byte for byte, so
//! nothing is lost or guessed; any other listing is left in the text.

use serde_json::{json, Map, Value};

const INTRO: &str = "You have access to the following functions:";
const CALL_FORMAT: &str = "If you choose to call a function ONLY reply in the following format";
const REMINDER_END: &str = "</IMPORTANT>";
const NO_PARAMETERS: &str = "No parameters are required for this function.";

/// What [`extract`] made of a system text.
#[derive(Debug, Clone, PartialEq)]
pub enum Listing {
    /// No listing in the text.
    None,
    /// The tools, and the text with the listing (intro, blocks, call-format instructions)
    /// taken out.
    Parsed { tools: Vec<Value>, text: String },
    /// A listing that does not parse exactly: the text stays as it is.
    Unparsed,
}

/// Finds and parses a function listing in `text`.
pub fn extract(text: &str) -> Listing {
    let Some(first) = text.find("---- BEGIN FUNCTION #1: ") else {
        return Listing::None;
    };
    let Some(blocks_end) = last_end_line(text) else {
        return Listing::Unparsed;
    };
    if blocks_end < first {
        return Listing::Unparsed;
    }
    let Some(tools) = parse_blocks(&text[first..blocks_end]) else {
        return Listing::Unparsed;
    };
    // The intro line right before the blocks goes with them.
    let before = text[..first].trim_end();
    let start = match before.strip_suffix(INTRO) {
        Some(rest) => rest.len(),
        None => first,
    };
    // So do the call-format instructions right after them, through their `</IMPORTANT>`.
    let after = &text[blocks_end..];
    let skipped = after.len() - after.trim_start().len();
    let mut end = blocks_end;
    if after.trim_start().starts_with(CALL_FORMAT) {
        if let Some(p) = after.find(REMINDER_END) {
            end = blocks_end + p + REMINDER_END.len();
        } else {
            return Listing::Unparsed;
        }
    } else {
        end += skipped.min(after.len());
    }
    let head = text[..start].trim_end();
    let tail = text[end..].trim_start();
    // A block left over (one that failed to close) means the listing was not read whole.
    if tail.contains("---- BEGIN FUNCTION #") || head.contains("---- BEGIN FUNCTION #") {
        return Listing::Unparsed;
    }
    let text = match (head.is_empty(), tail.is_empty()) {
        (true, _) => tail.to_owned(),
        (_, true) => head.to_owned(),
        _ => format!("{head}\n\n{tail}"),
    };
    Listing::Parsed { tools, text }
}

/// One past the end of the last `---- END FUNCTION #N ----` line (its newline included).
fn last_end_line(text: &str) -> Option<usize> {
    let p = text.rfind("---- END FUNCTION #")?;
    let line_end = text[p..].find('\n').map_or(text.len(), |n| p + n + 1);
    text[p..line_end]
        .trim_end()
        .ends_with(" ----")
        .then_some(line_end)
}

/// Parses consecutive blocks; `None` unless the formatting of the result is `blocks` exactly.
fn parse_blocks(blocks: &str) -> Option<Vec<Value>> {
    let mut tools = Vec::new();
    let mut rest = blocks;
    // Bounded by the text: every iteration consumes one block.
    while !rest.is_empty() {
        let n = tools.len() + 1;
        let begin = format!("---- BEGIN FUNCTION #{n}: ");
        let body = rest.strip_prefix(begin.as_str())?;
        let name_end = body.find(" ----\n")?;
        let name = &body[..name_end];
        let body = &body[name_end + " ----\n".len()..];
        let end = format!("---- END FUNCTION #{n} ----\n");
        let close = body.find(end.as_str())?;
        tools.push(parse_block(name, &body[..close])?);
        rest = &body[close + end.len()..];
        // Blocks after the first are separated by one newline.
        if !rest.is_empty() {
            rest = rest.strip_prefix('\n')?;
        }
    }
    (!tools.is_empty() && describe(&tools) == blocks).then_some(tools)
}

fn parse_block(name: &str, body: &str) -> Option<Value> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let body = body.strip_prefix("Description: ")?;
    let (description, parameters) =
        if let Some(d) = body.strip_suffix(&format!("\n{NO_PARAMETERS}\n")) {
            (d, None)
        } else {
            let at = body.find("\nParameters:\n")?;
            (
                &body[..at],
                Some(parse_parameters(&body[at + "\nParameters:\n".len()..])?),
            )
        };
    let mut function = Map::new();
    function.insert("name".into(), json!(name));
    function.insert("description".into(), json!(description));
    if let Some(p) = parameters {
        function.insert("parameters".into(), p);
    }
    Some(json!({"type": "function", "function": function}))
}

/// `  (1) name (type, required): description` lines, each description possibly running over
/// several lines and ending in an `Allowed values: [...]` line.
fn parse_parameters(text: &str) -> Option<Value> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let n = properties.len() + 1;
        let line = rest.strip_prefix(format!("  ({n}) ").as_str())?;
        let open = line.find(" (")?;
        let name = &line[..open];
        let close = line[open..].find("): ")? + open;
        let (kind, status) = line[open + 2..close].split_once(", ")?;
        let status = match status {
            "required" => true,
            "optional" => false,
            _ => return None,
        };
        let desc_and_rest = &line[close + 3..];
        // The description runs to the next parameter's line or the end of the text.
        let next = format!("\n  ({}) ", n + 1);
        let desc_end = desc_and_rest
            .find(next.as_str())
            .map_or_else(|| desc_and_rest.strip_suffix('\n').map(str::len), Some)?;
        let mut description = &desc_and_rest[..desc_end];
        let mut schema = Map::new();
        schema.insert("type".into(), json!(kind));
        if let Some(at) = description.rfind("\nAllowed values: [") {
            let list = description[at + "\nAllowed values: [".len()..].strip_suffix(']')?;
            let values: Option<Vec<Value>> = list
                .split(", ")
                .map(|v| v.strip_prefix('`')?.strip_suffix('`').map(|v| json!(v)))
                .collect();
            schema.insert("enum".into(), Value::Array(values?));
            description = &description[..at];
        }
        schema.insert("description".into(), json!(description));
        if name.is_empty() || properties.contains_key(name) {
            return None;
        }
        properties.insert(name.to_owned(), Value::Object(schema));
        if status {
            required.push(json!(name));
        }
        rest = &desc_and_rest[desc_end + 1..];
    }
    Some(json!({"type": "object", "properties": properties, "required": required}))
}

/// The converter's formatting of `tools` (OpenHands `convert_tools_to_description`).
fn describe(tools: &[Value]) -> String {
    let mut out = String::new();
    for (i, tool) in tools.iter().enumerate() {
        let f = &tool["function"];
        if i > 0 {
            out.push('\n');
        }
        let name = f["name"].as_str().unwrap_or_default();
        let description = f["description"].as_str().unwrap_or_default();
        out.push_str(&format!("---- BEGIN FUNCTION #{}: {name} ----\n", i + 1));
        out.push_str(&format!("Description: {description}\n"));
        match f.get("parameters") {
            Some(p) => {
                out.push_str("Parameters:\n");
                let required: Vec<&str> = p["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let empty = Map::new();
                let properties = p["properties"].as_object().unwrap_or(&empty);
                for (j, (pname, info)) in properties.iter().enumerate() {
                    let status = if required.contains(&pname.as_str()) {
                        "required"
                    } else {
                        "optional"
                    };
                    let kind = info["type"].as_str().unwrap_or("string");
                    let mut desc = info["description"]
                        .as_str()
                        .unwrap_or("No description provided")
                        .to_owned();
                    if let Some(values) = info.get("enum").and_then(Value::as_array) {
                        let values: Vec<String> = values
                            .iter()
                            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
                            .collect();
                        desc.push_str(&format!("\nAllowed values: [{}]", values.join(", ")));
                    }
                    out.push_str(&format!(
                        "  ({}) {pname} ({kind}, {status}): {desc}\n",
                        j + 1
                    ));
                }
            }
            None => {
                out.push_str(NO_PARAMETERS);
                out.push('\n');
            }
        }
        out.push_str(&format!("---- END FUNCTION #{} ----\n", i + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "---- BEGIN FUNCTION #1: bash ----\nDescription: Execute a bash command in the terminal.\nParameters:\n  (1) command (string, required): The bash command to execute.\nCan be empty to view more logs.\n---- END FUNCTION #1 ----\n\n---- BEGIN FUNCTION #2: submit ----\nDescription: submit your changes\nNo parameters are required for this function.\n---- END FUNCTION #2 ----\n\n---- BEGIN FUNCTION #3: str_replace_editor ----\nDescription: Custom editing tool\n* State is persistent\nParameters:\n  (1) command (string, required): The commands to run.\nAllowed values: [`view`, `create`]\n  (2) path (string, required): Absolute path to file or directory.\n  (3) view_range (array, optional): Line range.\n---- END FUNCTION #3 ----\n";

    const CALL_FORMAT_TEXT: &str = "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n<function=example_function_name>\n<parameter=example_parameter_1>value_1</parameter>\n</function>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format, start with <function= and end with </function>\n</IMPORTANT>";

    #[test]
    fn a_listing_becomes_tools_and_leaves_the_text() {
        let text = format!(
            "You are a helpful assistant.\n\nYou have access to the following functions:\n\n{LISTING}\n\n{CALL_FORMAT_TEXT}\n\nWork carefully."
        );
        let Listing::Parsed { tools, text } = extract(&text) else {
            panic!("not parsed");
        };
        assert_eq!(text, "You are a helpful assistant.\n\nWork carefully.");
        assert_eq!(tools.len(), 3);
        assert_eq!(
            tools[0],
            json!({"type": "function", "function": {"name": "bash", "description": "Execute a bash command in the terminal.", "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The bash command to execute.\nCan be empty to view more logs."}}, "required": ["command"]}}})
        );
        assert_eq!(
            tools[1],
            json!({"type": "function", "function": {"name": "submit", "description": "submit your changes"}})
        );
        assert_eq!(
            tools[2]["function"]["parameters"],
            json!({"type": "object", "properties": {
                "command": {"type": "string", "enum": ["view", "create"], "description": "The commands to run."},
                "path": {"type": "string", "description": "Absolute path to file or directory."},
                "view_range": {"type": "array", "description": "Line range."}},
                "required": ["command", "path"]})
        );
        assert_eq!(
            tools[2]["function"]["description"],
            "Custom editing tool\n* State is persistent"
        );
        assert_eq!(describe(&tools), LISTING);
    }

    #[test]
    fn anything_that_does_not_round_trip_is_left_alone() {
        assert_eq!(extract("You are helpful."), Listing::None);
        for broken in [
            LISTING.replace("#2: submit", "#3: submit"),
            LISTING.replace("(2) path", "(4) path"),
            LISTING.replace("required): The bash", "mandatory): The bash"),
            LISTING.replace("---- END FUNCTION #3 ----\n", ""),
            LISTING.replace("Description: submit", "Summary: submit"),
        ] {
            assert_eq!(
                extract(&format!("{INTRO}\n\n{broken}")),
                Listing::Unparsed,
                "{broken}"
            );
        }
        // Call-format instructions without their closing tag.
        let text = format!("{INTRO}\n\n{LISTING}\n{CALL_FORMAT}:\n<function=x>");
        assert_eq!(extract(&text), Listing::Unparsed);
    }
}
