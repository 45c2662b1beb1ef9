//! The text that curation steps look at: a role scope of a conversation, and one normalization
//! shared by near-duplicate detection, decontamination and the repetition filter.
//!
//! [`RowText`] computes each scope's text and its normalization at most once per row, so steps
//! that read the same scope (e.g. near-dup and decontamination on `all`) share the work.

use crate::conversation::{Conversation, Message, Role};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::OnceCell;
use unicode_normalization_alignments::UnicodeNormalization;

/// Which turns a step reads. Each step documents its own default (see its config).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// User turns (tool responses wrapped as user turns included).
    User,
    /// Assistant turns: content, reasoning, and tool-call arguments.
    Assistant,
    /// System turns.
    System,
    /// The prompt side: system and user turns.
    Prompt,
    /// Every turn, tool responses included (not the tool schemas).
    #[default]
    All,
}

impl Scope {
    /// Whether a message of `role` belongs to the scope.
    pub fn includes(self, role: Role) -> bool {
        match self {
            Scope::User => role == Role::User,
            Scope::Assistant => role == Role::Assistant,
            Scope::System => role == Role::System,
            Scope::Prompt => matches!(role, Role::System | Role::User),
            Scope::All => true,
        }
    }

    /// A small index per scope, for per-scope caches.
    fn index(self) -> usize {
        match self {
            Scope::User => 0,
            Scope::Assistant => 1,
            Scope::System => 2,
            Scope::Prompt => 3,
            Scope::All => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Assistant => "assistant",
            Scope::System => "system",
            Scope::Prompt => "prompt",
            Scope::All => "all",
        }
    }
}

/// One row's scope texts and their normalizations, each computed on first use and then shared by
/// every step that reads it.
pub struct RowText<'c> {
    conversation: &'c Conversation,
    raw: [OnceCell<String>; 5],
    normalized: [OnceCell<String>; 5],
    /// Each message's normalized text: scopes overlap (`all` holds the assistant turns the
    /// repetition filter reads), and a scope's normalization is its messages' joined.
    messages: Vec<OnceCell<String>>,
}

impl<'c> RowText<'c> {
    pub fn new(conversation: &'c Conversation) -> Self {
        RowText {
            conversation,
            raw: Default::default(),
            normalized: Default::default(),
            messages: vec![OnceCell::new(); conversation.messages.len()],
        }
    }

    pub fn conversation(&self) -> &'c Conversation {
        self.conversation
    }

    /// [`scope_text`] of the row.
    pub fn scope(&self, scope: Scope) -> &str {
        self.raw[scope.index()].get_or_init(|| scope_text(self.conversation, scope))
    }

    /// [`normalize`] of the scope's text, as the non-empty normalizations of its messages
    /// joined by one space: the same, since the `"\n"` between parts is a separator and
    /// normalization starts afresh after each separator (the chunks of [`normalize`]).
    pub fn normalized(&self, scope: Scope) -> &str {
        self.normalized[scope.index()].get_or_init(|| {
            let texts: Vec<&str> = self
                .conversation
                .messages
                .iter()
                .zip(&self.messages)
                .filter(|(m, _)| scope.includes(m.role))
                .map(|(m, cell)| {
                    cell.get_or_init(|| {
                        // The message's parts normalized one after the other: the same as
                        // normalizing them joined by `"\n"` (a separator), without the copy.
                        let mut text = String::with_capacity(m.content.len());
                        for_each_part(m, &mut |part| normalize_into(&mut text, part));
                        text
                    })
                    .as_str()
                })
                .filter(|t| !t.is_empty())
                .collect();
            texts.join(" ")
        })
    }
}

/// The texts of the scope's turns joined by `"\n"`, in message order.
///
/// A message contributes its content, then (assistant turns) its reasoning, then each tool call's
/// argument values (strings as they are, other JSON values compactly serialized): code written
/// through a tool call is the model's output as much as code in the content. Tool names and
/// argument keys are left out: they are schema, not text. Empty parts are skipped.
pub fn scope_text(c: &Conversation, scope: Scope) -> String {
    let mut out = String::new();
    for m in c.messages.iter().filter(|m| scope.includes(m.role)) {
        push_message(&mut out, m);
    }
    out
}

/// The texts of one message, as [`scope_text`] joins them.
pub fn message_text(m: &Message) -> String {
    let mut out = String::new();
    push_message(&mut out, m);
    out
}

fn push_message(out: &mut String, m: &Message) {
    for_each_part(m, &mut |part| push_part(out, part));
}

/// Calls `f` with each of a message's texts, in [`scope_text`]'s order (empty ones too).
fn for_each_part(m: &Message, f: &mut dyn FnMut(&str)) {
    f(&m.content);
    if let Some(r) = &m.reasoning {
        f(r);
    }
    for call in &m.tool_calls {
        for value in call.arguments.values() {
            match value {
                Value::String(s) => f(s),
                other => f(&other.to_string()),
            }
        }
    }
}

fn push_part(out: &mut String, part: &str) {
    if part.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(part);
}

/// Normalizes text for matching: Unicode NFKC, then lowercase, then every character that is not
/// alphanumeric becomes a separator (punctuation, symbols, whitespace, control characters), runs
/// of separators collapse to one space, and the result is trimmed. Han, Hiragana and Katakana
/// characters each stand as a word of their own, since those scripts do not separate words with
/// spaces.
///
/// `"Hello,  WORLD!\n ｆｏｏ_bar"` → `"hello world foo bar"`.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    normalize_into(&mut out, text);
    out
}

/// Appends [`normalize`]`(text)` to `out`, after a space when both are non-empty: `out` ends up
/// as the normalization of its text and `text` joined by a separator.
pub fn normalize_into(out: &mut String, text: &str) {
    // Whether a separator is owed before the next word character.
    let mut gap = !out.is_empty();
    if text.is_ascii() {
        // Most rows: NFKC leaves ASCII as it is, and every character is one byte.
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() {
                if gap {
                    out.push(' ');
                    gap = false;
                }
                out.push(char::from(b.to_ascii_lowercase()));
            } else {
                gap = !out.is_empty();
            }
        }
        return;
    }
    fn push(out: &mut String, c: char, gap: &mut bool) {
        if !c.is_alphanumeric() {
            *gap = !out.is_empty();
            return;
        }
        let single = is_unspaced_script(c);
        if (*gap || single) && !out.is_empty() && !out.ends_with(' ') {
            out.push(' ');
        }
        *gap = single;
        out.extend(c.to_lowercase());
    }
    // NFKC runs only over the chunks between ASCII separators, and ASCII chunks skip it (NFKC
    // leaves ASCII as it is): the same result as NFKC over the whole text, since an ASCII
    // separator is a starter that nothing reorders across, and the only compositions it takes
    // part in (`<`, `=`, `>` with U+0338) give symbols that are separators too. Chunks are
    // found by bytes: an ASCII byte is always a whole character in UTF-8.
    let bytes = text.as_bytes();
    let is_separator = |b: u8| b.is_ascii() && !b.is_ascii_alphanumeric();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let mut ascii = true;
        while i < bytes.len() && !is_separator(bytes[i]) {
            ascii &= bytes[i].is_ascii();
            i += 1;
        }
        let chunk = &text[start..i];
        if ascii {
            // ASCII letters and digits only: what `push` does for each, a space owed before
            // the first, at most.
            if !chunk.is_empty() {
                if gap && !out.is_empty() && !out.ends_with(' ') {
                    out.push(' ');
                }
                gap = false;
                out.extend(chunk.bytes().map(|b| char::from(b.to_ascii_lowercase())));
            }
        } else {
            for (c, _) in chunk.nfkc() {
                push(out, c, &mut gap);
            }
        }
        if i < bytes.len() {
            // The separator.
            gap = !out.is_empty();
            i += 1;
        }
    }
}

/// [`normalize`], and for each character of the result the byte range of `text` it came from
/// (a composed character: the characters it was composed of; a space: the start of the word
/// after it), so that a match found in normalized text can be shown as it was written.
pub fn normalize_with_origins(text: &str) -> (String, Vec<(usize, usize)>) {
    let mut out = String::with_capacity(text.len());
    let mut origins: Vec<(usize, usize)> = Vec::with_capacity(text.len());
    let mut gap = false;
    let bytes = text.as_bytes();
    let is_separator = |b: u8| b.is_ascii() && !b.is_ascii_alphanumeric();
    let mut i = 0;
    // The chunks of [`normalize_into`], each through NFKC with its alignments: a change of 1
    // is a character NFKC added (it comes from the one before), -N one that absorbed the N
    // characters after it.
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && !is_separator(bytes[i]) {
            i += 1;
        }
        let chunk = &text[start..i];
        let mut raw = chunk.char_indices();
        let mut last = (start, start);
        for (c, change) in chunk.nfkc() {
            let next = if change < 1 { raw.next() } else { None };
            let from = match next {
                Some((at, rc)) => {
                    let mut end = start + at + rc.len_utf8();
                    for _ in 0..change.unsigned_abs() {
                        if let Some((at, rc)) = raw.next() {
                            end = start + at + rc.len_utf8();
                        }
                    }
                    (start + at, end)
                }
                _ => last,
            };
            last = from;
            if !c.is_alphanumeric() {
                gap = !out.is_empty();
                continue;
            }
            let single = is_unspaced_script(c);
            if (gap || single) && !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
                origins.push((from.0, from.0));
            }
            gap = single;
            for lower in c.to_lowercase() {
                out.push(lower);
                origins.push(from);
            }
        }
        if i < bytes.len() {
            gap = !out.is_empty();
            i += 1;
        }
    }
    (out, origins)
}

/// The words of [`normalize`]d text.
pub fn words(normalized: &str) -> impl Iterator<Item = &str> {
    normalized.split(' ').filter(|w| !w.is_empty())
}

/// Han ideographs, Hiragana and Katakana: scripts written without spaces between words.
fn is_unspaced_script(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF        // Hiragana, Katakana
        | 0x3400..=0x4DBF      // CJK Extension A
        | 0x4E00..=0x9FFF      // CJK Unified Ideographs
        | 0xF900..=0xFAFF      // CJK Compatibility Ideographs
        | 0x20000..=0x3134F    // CJK Extensions B..G
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;
    use indexmap::IndexMap;
    use serde_json::json;

    fn sample() -> Conversation {
        let mut args = IndexMap::new();
        args.insert("code".to_string(), json!("print(1)"));
        args.insert("n".to_string(), json!(3));
        Conversation {
            messages: vec![
                Message::system("Be brief."),
                Message::user("Hi?"),
                Message::assistant("Hello.")
                    .with_reasoning(Some("greet".into()))
                    .with_tool_calls(vec![ToolCall {
                        id: None,
                        name: "python".into(),
                        arguments: args,
                    }]),
                Message::tool("1"),
                Message::user("Bye"),
                Message::assistant(""),
            ],
            tools: vec![json!({"type": "function"})],
        }
    }

    #[test]
    fn scopes_pick_their_turns() {
        let c = sample();
        assert_eq!(scope_text(&c, Scope::User), "Hi?\nBye");
        assert_eq!(scope_text(&c, Scope::System), "Be brief.");
        assert_eq!(scope_text(&c, Scope::Prompt), "Be brief.\nHi?\nBye");
        assert_eq!(
            scope_text(&c, Scope::Assistant),
            "Hello.\ngreet\nprint(1)\n3"
        );
        assert_eq!(
            scope_text(&c, Scope::All),
            "Be brief.\nHi?\nHello.\ngreet\nprint(1)\n3\n1\nBye"
        );
    }

    #[test]
    fn scope_names_match_the_yaml() {
        for s in [
            Scope::User,
            Scope::Assistant,
            Scope::System,
            Scope::Prompt,
            Scope::All,
        ] {
            let parsed: Scope = serde_yaml_ng::from_str(s.as_str()).expect("scope");
            assert_eq!(parsed, s);
        }
        assert!(serde_yaml_ng::from_str::<Scope>("tool").is_err());
    }

    /// The definition: NFKC over the whole text, then the character rules.
    fn normalize_whole(text: &str) -> String {
        let mut out = String::new();
        let mut gap = false;
        for (c, _) in text.nfkc() {
            if !c.is_alphanumeric() {
                gap = !out.is_empty();
                continue;
            }
            let single = is_unspaced_script(c);
            if (gap || single) && !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
            gap = single;
            out.extend(c.to_lowercase());
        }
        out
    }

    #[test]
    fn each_normalized_character_knows_where_it_came_from() {
        let spans = |t: &str| {
            let (normalized, origins) = normalize_with_origins(t);
            let pieces: Vec<String> = normalized
                .chars()
                .zip(&origins)
                .map(|(c, &(from, to))| format!("{c}={}", &t[from..to]))
                .collect();
            (normalized, pieces.join(" "))
        };
        assert_eq!(
            spans("Hi, ﬁ Ｘ"),
            (
                "hi fi x".to_owned(),
                "h=H i=i  = f=ﬁ i=ﬁ  = x=Ｘ".to_owned()
            )
        );
        assert_eq!(
            spans("E\u{301}t 我爱"),
            (
                "ét 我 爱".to_owned(),
                "é=E\u{301} t=t  = 我=我  = 爱=爱".to_owned()
            )
        );
        // The same normalization as `normalize`, every origin on character boundaries.
        for t in [
            "Hello,  WORLD!\n ｆｏｏ_bar",
            "Ⅻ ﬁne ½",
            "Straße İSTANBUL ÉCOLE",
            "我爱Rust语言!",
            "e\u{301}t\u{e9}",
            "a=\u{338}b <\u{338} >\u{338}",
            " \u{301}x .\u{345}y",
            "ﬁ½x Ⅻ,ｆｏｏ-バー",
            "가\u{1161}각 한국어",
            "x\u{327}\u{301}.\u{301}\u{327}z",
            "日本。語 ⁵x²",
            "",
            "  ...  ",
        ] {
            let (normalized, origins) = normalize_with_origins(t);
            assert_eq!(normalized, normalize(t), "{t:?}");
            assert_eq!(origins.len(), normalized.chars().count(), "{t:?}");
            for &(from, to) in &origins {
                assert!(
                    from <= to && t.get(from..to).is_some(),
                    "{t:?} {from}..{to}"
                );
            }
        }
    }

    #[test]
    fn normalization() {
        assert_eq!(
            normalize("Hello,  WORLD!\n ｆｏｏ_bar"),
            "hello world foo bar"
        );
        assert_eq!(normalize("  ...  "), "");
        assert_eq!(normalize("Ⅻ ﬁne ½"), "xii fine 1 2");
        assert_eq!(normalize("Straße ÉCOLE"), "straße école");
        assert_eq!(normalize("我爱Rust语言!"), "我 爱 rust 语 言");
        assert_eq!(normalize("日本語です"), "日 本 語 で す");
        assert_eq!(normalize("def f(x):\n\treturn x+1"), "def f x return x 1");
        // The ASCII fast path and the general path agree.
        for t in [
            "Hello,  WORLD!\n foo_bar",
            "  x--y  ",
            "",
            "A1 b2\tC3.",
            "\u{7f}ctl\u{1}x",
        ] {
            let general = normalize(&format!("{t}é"))
                .trim_end_matches('é')
                .trim_end()
                .to_string();
            assert_eq!(normalize(t), general, "{t:?}");
        }
        // The chunked normalization equals NFKC over the whole text, across ASCII separators
        // followed by combining marks, compositions with them, and decompositions to ASCII.
        for t in [
            "e\u{301}t\u{e9}",
            "a=\u{338}b <\u{338} >\u{338}",
            " \u{301}x .\u{345}y",
            "ﬁ½x Ⅻ,ｆｏｏ-バー",
            "가\u{1161}각 한국어",
            "x\u{327}\u{301}.\u{301}\u{327}z",
            "日本。語 ⁵x²",
            "Zürich,Straße...ÉCOLE\n\t我爱Rust",
        ] {
            assert_eq!(normalize(t), normalize_whole(t), "{t:?}");
        }
        // A scope's normalization built from its messages' equals the whole scope's.
        let parts = [
            "",
            "  ",
            "Hello, WORLD",
            "!!",
            "我爱Rust",
            "语言",
            "e\u{301}",
            "\u{301}x",
            "ﬁ½",
            "日本。",
            "a\nb",
            "x ",
            " y",
            "Straße",
            "-",
        ];
        let mut rng = super::super::Lcg(0);
        let mut part = || parts[rng.below(parts.len() as u64) as usize];
        for case in 0..300 {
            let mut messages = Vec::new();
            for j in 0..(case % 6) {
                let text = format!("{}{}", part(), part());
                messages.push(match j % 3 {
                    0 => Message::user(&text),
                    1 => Message::assistant(&text).with_reasoning(Some(part().into())),
                    _ => Message::system(&text),
                });
            }
            let c = Conversation {
                messages,
                ..Default::default()
            };
            let row = RowText::new(&c);
            for scope in [
                Scope::User,
                Scope::Assistant,
                Scope::System,
                Scope::Prompt,
                Scope::All,
            ] {
                assert_eq!(
                    row.normalized(scope),
                    normalize(&scope_text(&c, scope)),
                    "{c:?} {scope:?}"
                );
            }
        }
        let n = normalize("a  b\tc");
        assert_eq!(words(&n).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(words("").count(), 0);
    }
}
