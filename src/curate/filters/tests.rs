//! Unit tests of the filters, through [`Filters`] as the engine runs them.

use super::*;
use crate::conversation::{Conversation, Message};

fn parse(yaml: &str) -> Vec<FilterConfig> {
    serde_yaml_ng::from_str(yaml).expect("filters parse")
}

fn compile(yaml: &str) -> Filters {
    Filters::compile(&parse(yaml), &[]).expect("filters compile")
}

fn compile_err(yaml: &str) -> String {
    Filters::compile(&parse(yaml), &[])
        .expect_err("compile fails")
        .to_string()
}

fn chat(turns: &[(&str, &str)]) -> Conversation {
    Conversation {
        messages: turns
            .iter()
            .map(|&(role, text)| match role {
                "system" => Message::system(text),
                "user" => Message::user(text),
                "tool" => Message::tool(text),
                _ => Message::assistant(text),
            })
            .collect(),
        tools: vec![],
    }
}

fn dropped(f: &Filters, c: &Conversation) -> Option<(String, String)> {
    f.check_content(c).err().map(|d| (d.filter, d.detail))
}

#[test]
fn the_yaml_of_the_docs_parses_and_names_every_filter() {
    let f = compile(
        r#"
- turns: {min: 2, max: 400}
- assistant_chars: {min: 1, max: 200000}
- language: {keep: [en, zh], min_confidence: 0.5, scope: user}
- regex: {name: refusals, exclude: ["(?i)as an ai language model"], scope: assistant}
- regex: {include: ["def |class "], scope: assistant}
- repetition: {scope: assistant, max_duplicate_line_fraction: 0.3}
- tokens: {min: 64, max: 4096}
- supervised_tokens: {min: 32}
"#,
    );
    assert_eq!(
        f.names(),
        [
            "turns",
            "assistant_chars",
            "language",
            "refusals",
            "regex",
            "repetition",
            "tokens",
            "supervised_tokens"
        ]
    );
    assert!(f.has_token_filters());
    assert!(f.has_content_filters());
    assert!(!compile("- turns: {min: 1}").has_token_filters());
}

/// A kind is one file of this folder named as the kind, and one line of `filters!`: a file
/// left unregistered (or a kind without its file) fails here.
#[test]
fn every_kind_is_one_file_and_every_file_one_kind() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/curate/filters");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("filters folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .filter(|stem| stem != "mod" && stem != "tests")
        .collect();
    files.sort();
    let mut kinds = KINDS.to_vec();
    kinds.sort();
    assert_eq!(files, kinds);
    assert_eq!(
        FilterConfig::token_kinds(),
        "`tokens` and `supervised_tokens`"
    );
}

#[test]
fn unknown_fields_and_kinds_are_errors() {
    let err = |yaml: &str| {
        serde_yaml_ng::from_str::<Vec<FilterConfig>>(yaml)
            .expect_err("rejected")
            .to_string()
    };
    assert!(err("- turns: {min: 1, mx: 3}").contains("unknown field `mx`"));
    assert!(err("- words: {min: 1}").contains("unknown variant `words`"));
    assert!(err("- regex: {exclude: [a], scope: tool}").contains("unknown variant `tool`"));
    let e = err("- turns: {min: 1}\n  tokens: {max: 3}");
    assert!(e.contains("`tokens` follows `turns`"), "{e}");
    assert!(err("- {}").contains("a map with one key"));
}

#[test]
fn compile_errors_name_the_filter() {
    assert_eq!(
        compile_err("- turns: {min: 5, max: 2}"),
        "filter `turns` (turns): min 5 > max 2"
    );
    assert_eq!(
        compile_err("- tokens: {}"),
        "filter `tokens` (tokens): give `min`, `max` or both"
    );
    let e = compile_err("- regex: {name: code, include: ['def (']}");
    assert!(
        e.starts_with("filter `code` (regex): pattern `def (`: "),
        "{e}"
    );
    assert_eq!(
        compile_err("- regex: {scope: user}"),
        "filter `regex` (regex): give `include`, `exclude` or both"
    );
    let e = compile_err("- language: {keep: [en, xx]}");
    assert!(
        e.starts_with("filter `language` (language): unknown language code `xx` (ISO 639-1"),
        "{e}"
    );
    assert_eq!(
        compile_err("- language: {keep: [en], min_confidence: 1.5}"),
        "filter `language` (language): min_confidence 1.5 is not between 0 and 1"
    );
    assert_eq!(
            compile_err("- repetition: {max_top_ngram_char_fraction: {0: 0.2}}"),
            "filter `repetition` (repetition): max_top_ngram_char_fraction: n = 0 is not between 1 and 64"
        );
    assert_eq!(
        compile_err("- regex: {exclude: [a]}\n- regex: {exclude: [b]}"),
        "two global filters are named `regex`: give each a distinct `name:`"
    );
    assert_eq!(
        compile_err("- regex: {name: 'a b', exclude: [a]}"),
        "filter name `a b`: use letters, digits, `_` and `-`"
    );
    // The same name in the global and a source list is one count key.
    let global = parse("- turns: {min: 2}");
    let source = parse("- turns: {max: 3}");
    let both = Filters::compile(&global, &source).expect("compiles");
    assert_eq!(both.names(), ["turns"]);
    let source_twice = parse("- turns: {max: 3}\n- turns: {max: 4}");
    assert_eq!(
        Filters::compile(&global, &source_twice)
            .expect_err("twice")
            .to_string(),
        "two source filters are named `turns`: give each a distinct `name:`"
    );
}

#[test]
fn global_filters_run_first_and_the_first_drop_counts() {
    let global = parse("- regex: {name: no_foo, exclude: [foo]}");
    let source = parse("- turns: {min: 4}\n- regex: {name: no_bar, exclude: [bar]}");
    let f = Filters::compile(&global, &source).expect("compiles");
    assert_eq!(f.names(), ["no_foo", "turns", "no_bar"]);
    let c = chat(&[("user", "foo bar"), ("assistant", "x")]);
    assert_eq!(
        dropped(&f, &c),
        Some(("no_foo".into(), "matches exclude pattern `foo`".into()))
    );
    let c = chat(&[("user", "bar"), ("assistant", "x")]);
    assert_eq!(
        dropped(&f, &c),
        Some(("turns".into(), "turns 2 < min 4".into()))
    );
    let c = chat(&[
        ("user", "bar"),
        ("assistant", "x"),
        ("user", "y"),
        ("assistant", "z"),
    ]);
    assert_eq!(
        dropped(&f, &c),
        Some(("no_bar".into(), "matches exclude pattern `bar`".into()))
    );
    let c = chat(&[
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
        ("assistant", "d"),
    ]);
    assert_eq!(dropped(&f, &c), None);
}

#[test]
fn turns_count_user_and_assistant_messages() {
    let f = compile("- turns: {min: 2, max: 3}");
    let with_extras = chat(&[
        ("system", "s"),
        ("user", "u"),
        ("assistant", "a"),
        ("tool", "t"),
        ("tool", "t"),
    ]);
    assert_eq!(dropped(&f, &with_extras), None);
    let long = chat(&[
        ("user", "u"),
        ("assistant", "a"),
        ("user", "u"),
        ("assistant", "a"),
    ]);
    assert_eq!(
        dropped(&f, &long),
        Some(("turns".into(), "turns 4 > max 3".into()))
    );
}

#[test]
fn assistant_chars_checks_every_assistant_turn() {
    let f = compile("- assistant_chars: {min: 2, max: 5}");
    let c = chat(&[
        ("user", "a long user turn"),
        ("assistant", "ok"),
        ("user", "q"),
        ("assistant", "héllo!"),
    ]);
    assert_eq!(
        dropped(&f, &c),
        Some((
            "assistant_chars".into(),
            "assistant turn 2 characters 6 > max 5".into()
        ))
    );
    // Characters, not bytes: "héllo" is 5 characters, 6 bytes.
    let c = chat(&[("user", "q"), ("assistant", "héllo")]);
    assert_eq!(dropped(&f, &c), None);
    // A tool-call-only turn counts its arguments, so it is not empty.
    let mut args = indexmap::IndexMap::new();
    args.insert("q".to_string(), serde_json::json!("abc"));
    let call = crate::conversation::ToolCall {
        id: None,
        name: "search".into(),
        arguments: args,
    };
    let c = Conversation {
        messages: vec![
            Message::user("q"),
            Message::assistant("").with_tool_calls(vec![call]),
        ],
        tools: vec![],
    };
    assert_eq!(dropped(&f, &c), None);
    let c = chat(&[("user", "q"), ("assistant", "")]);
    assert_eq!(
        dropped(&f, &c),
        Some((
            "assistant_chars".into(),
            "assistant turn 1 characters 0 < min 2".into()
        ))
    );
}

#[test]
fn language_keeps_the_listed_languages() {
    let f = compile("- language: {keep: [en, zh], min_confidence: 0.5}");
    let en = chat(&[
            ("user", "Could you please explain how the garbage collector in Java decides which objects to free?"),
            ("assistant", "Bien sûr, voici une explication détaillée du ramasse-miettes."),
        ]);
    assert_eq!(dropped(&f, &en), None, "scope is user by default");
    let zh = chat(&[
        (
            "user",
            "请解释一下Java的垃圾回收器是如何决定释放哪些对象的。",
        ),
        ("assistant", "x"),
    ]);
    assert_eq!(dropped(&f, &zh), None);
    let de = chat(&[
            ("user", "Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?"),
            ("assistant", "x"),
        ]);
    let (name, detail) = dropped(&f, &de).expect("German is dropped");
    assert_eq!(name, "language");
    assert!(
        detail.starts_with("language de (") && detail.ends_with(") not in [en, zh]"),
        "{detail}"
    );
    let none = chat(&[("assistant", "Hello there, how are you doing today?")]);
    assert_eq!(
        dropped(&f, &none),
        Some((
            "language".into(),
            "no language detected in user text".into()
        ))
    );
    // ISO 639-3 codes work too, and the scope can be the assistant's.
    let f = compile("- language: {keep: [fra], scope: assistant}");
    assert_eq!(dropped(&f, &en), None);
    // A kept language is kept at any confidence; another one drops the row only when
    // the detector is at least `min_confidence` sure of it.
    let short = chat(&[(
        "user",
        "Translate to French. Good morning, how are you today?",
    )]);
    let f = compile("- language: {keep: [en], min_confidence: 0.99}");
    assert_eq!(dropped(&f, &short), None);
    let f = compile("- language: {keep: [de], min_confidence: 0.99}");
    assert_eq!(dropped(&f, &short), None, "not sure enough it is English");
    let f = compile("- language: {keep: [de], min_confidence: 0.01}");
    let (_, detail) = dropped(&f, &short).expect("sure it is English");
    assert!(detail.starts_with("language en ("), "{detail}");
    // The strict rule, when asked for: low confidence drops whatever the language.
    let f = compile("- language: {keep: [en], min_confidence: 0.99, drop_low_confidence: true}");
    let (_, detail) = dropped(&f, &short).expect("low confidence");
    assert!(
        detail.starts_with("language en confidence 0.") && detail.ends_with(" < 0.99"),
        "{detail}"
    );
}

fn judged(f: &Filters, c: &Conversation) -> Option<String> {
    f.check_content(c).err().and_then(|d| d.text)
}

#[test]
fn a_dropped_row_records_the_text_its_filter_judged() {
    // A regex: its match, with context evenly either side, cut to EVIDENCE_CHARS.
    let f = compile(
        r#"- regex: {name: refusals, exclude: ["(?i)as an ai language model"], scope: assistant}"#,
    );
    let short = chat(&[
        ("user", "hi"),
        ("assistant", "Sorry. As an AI language model, I can't."),
    ]);
    assert_eq!(
        judged(&f, &short).as_deref(),
        Some("Sorry. As an AI language model, I can't.")
    );
    let long = format!(
        "{}As an AI language model{}",
        "a".repeat(300),
        "b".repeat(300)
    );
    let expected = format!(
        "…{}As an AI language model{}…",
        "a".repeat(88),
        "b".repeat(89)
    );
    let long = chat(&[("user", "hi"), ("assistant", long.as_str())]);
    assert_eq!(judged(&f, &long), Some(expected));
    // At the start: the context all after it.
    let first = format!("As an AI language model{}", "b".repeat(300));
    let expected = format!("As an AI language model{}…", "b".repeat(177));
    let first = chat(&[("user", "hi"), ("assistant", first.as_str())]);
    assert_eq!(judged(&f, &first), Some(expected));
    // Language: the scope's text the detector read (its first EVIDENCE_CHARS characters).
    let f = compile("- language: {keep: [en]}");
    let de = chat(&[
        ("user", "Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?"),
        ("assistant", "Ja."),
    ]);
    assert_eq!(
        judged(&f, &de).as_deref(),
        Some("Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?")
    );
    let long = format!("Wie geht es dir heute? {}", "Sehr gut, danke. ".repeat(20));
    let text = judged(&f, &chat(&[("user", long.as_str()), ("assistant", "x")]))
        .expect("German is dropped");
    assert_eq!(text.chars().count(), EVIDENCE_CHARS + 1);
    assert!(text.starts_with("Wie geht es dir heute? Sehr gut") && text.ends_with("…"));
    // Repetition: the passage that repeats.
    let f = compile("- repetition: {}");
    let rep = "Intro line here.\nBuy now, limited offer!\nBuy now, limited offer!\nBuy now, limited offer!";
    assert_eq!(
        judged(&f, &chat(&[("user", "q"), ("assistant", rep)])).as_deref(),
        Some("Buy now, limited offer!")
    );
    // A count judges no text.
    let f = compile("- turns: {min: 3}");
    assert_eq!(judged(&f, &short), None);
}

#[test]
fn regex_include_and_exclude_on_a_scope() {
    let f = compile(
        r#"
- regex: {name: refusals, exclude: ["(?i)as an ai language model", "(?i)i cannot help"], scope: assistant}
- regex: {name: code, include: ["def |class "], scope: assistant}
"#,
    );
    let refusal = chat(&[
        ("user", "write def f"),
        ("assistant", "As an AI language model, I can't."),
    ]);
    assert_eq!(
        dropped(&f, &refusal),
        Some((
            "refusals".into(),
            "matches exclude pattern `(?i)as an ai language model`".into()
        ))
    );
    let user_says_it = chat(&[
        ("user", "As an AI language model, write code"),
        ("assistant", "def f(): pass"),
    ]);
    assert_eq!(dropped(&f, &user_says_it), None);
    let prose = chat(&[("user", "def f"), ("assistant", "Use a loop.")]);
    assert_eq!(
        dropped(&f, &prose),
        Some((
            "code".into(),
            "assistant text matches no include pattern".into()
        ))
    );
}

#[test]
fn repetition_rules() {
    let f = compile("- repetition: {}");
    let c = |answer: &str| chat(&[("user", "q"), ("assistant", answer)]);
    // Varied prose passes.
    let fine = "The quick brown fox jumps over the lazy dog.\nA second line says something else entirely.\n\nThen a new paragraph with different words in it.";
    assert_eq!(dropped(&f, &c(fine)), None);
    // Short answers pass: a single n-gram is not a repetition.
    assert_eq!(dropped(&f, &c("Yes.")), None);
    assert_eq!(dropped(&f, &c("Paris is the capital.")), None);
    // Lone braces and blank lines are not counted as lines.
    let code = "fn a() {\n    one();\n}\n\nfn b() {\n    two();\n}\n";
    assert_eq!(dropped(&f, &c(code)), None);
    let looped = "I am sorry.\nI am sorry.\nI am sorry.\nPlease ask again.";
    assert_eq!(
        dropped(&f, &c(looped)),
        Some((
            "repetition".into(),
            "duplicate line fraction 0.500 > 0.3".into()
        ))
    );
    let words = "buy now buy now buy now buy now buy now and save a lot of money today";
    let (_, detail) = dropped(&f, &c(words)).expect("2-gram repetition");
    // "buy now" ×5 is 30 of 53 word characters.
    assert_eq!(detail, "top 2-gram character fraction 0.566 > 0.2");
    // Rules can be turned off, and the scope moved.
    let off = compile(
            "- repetition: {max_duplicate_line_fraction: null, max_duplicate_line_char_fraction: null, \
             max_duplicate_paragraph_fraction: null, max_duplicate_paragraph_char_fraction: null, \
             max_top_ngram_char_fraction: {}, max_duplicate_ngram_char_fraction: {}}",
        );
    assert_eq!(dropped(&off, &c(looped)), None);
    let user_scope = compile("- repetition: {scope: user}");
    assert_eq!(dropped(&user_scope, &c(looped)), None);
}

/// `lines` and `paragraphs` against their plain definitions, on random texts of lines with
/// spaces, tabs, `\r`, blank lines and lines without letters.
#[test]
fn token_filters() {
    let f = compile("- tokens: {min: 4, max: 10}\n- supervised_tokens: {name: sup, min: 2}");
    assert_eq!(f.check_tokens(4, 2), Ok(()));
    assert_eq!(
        f.check_tokens(11, 0),
        Err(Dropped {
            filter: "tokens".into(),
            detail: "tokens 11 > max 10".into(),
            text: None,
        })
    );
    assert_eq!(
        f.check_tokens(5, 1),
        Err(Dropped {
            filter: "sup".into(),
            detail: "supervised tokens 1 < min 2".into(),
            text: None,
        })
    );
    // Token filters never drop on content.
    assert_eq!(f.check_content(&chat(&[("user", "x")])), Ok(()));
}
/// The false-drop rate of `language: {keep: [en], min_confidence: 0.5}` on real English
/// prompts in the fixtures (docs/curation-notes.md): the strict rule (`drop_low_confidence:
/// true`, the rule before) against the default. Print with `--nocapture`.
#[test]
fn language_false_drops_on_real_english_prompts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).expect("fixture");
    let field = |p: &str, key: &str| -> Vec<String> {
        read(p)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("json");
                v[key].as_str().expect("text").to_owned()
            })
            .collect()
    };
    // Every first user turn of the real-row fixtures' expected conversations.
    let mut chats = Vec::new();
    for dir in std::fs::read_dir(&root).expect("fixtures") {
        let expected = dir.expect("entry").path().join("expected.jsonl");
        let Ok(text) = std::fs::read_to_string(&expected) else {
            continue;
        };
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            let messages = v["conversation"]["messages"].as_array().cloned();
            let first_user = messages.into_iter().flatten().find(|m| m["role"] == "user");
            if let Some(text) = first_user.as_ref().and_then(|m| m["content"].as_str()) {
                chats.push(text.to_owned());
            }
        }
    }
    let corpora = [
        (
            "HumanEval prompts (code + docstring)",
            field("benchmarks/HumanEval.jsonl", "prompt"),
        ),
        (
            "MBPP task texts",
            field("benchmarks/mbpp_sample.jsonl", "text"),
        ),
        ("first user turns of the real-row fixtures", chats),
    ];
    let strict =
        compile("- language: {keep: [en], min_confidence: 0.5, drop_low_confidence: true}");
    let default = compile("- language: {keep: [en], min_confidence: 0.5}");
    for (name, texts) in corpora {
        let drops = |f: &Filters| {
            texts
                .iter()
                .filter(|t| dropped(f, &chat(&[("user", t), ("assistant", "x")])).is_some())
                .count()
        };
        let (before, after) = (drops(&strict), drops(&default));
        println!(
            "{name}: {} prompts, dropped {before} strict, {after} default",
            texts.len()
        );
        assert!(after <= before, "{name}");
        // Detected as English: never dropped by default; what it drops is another
        // language detected with confidence 0.5 or more.
        for t in &texts {
            if let Some((_, detail)) = dropped(&default, &chat(&[("user", t), ("assistant", "x")]))
            {
                assert!(detail.ends_with("not in [en]"), "{detail}");
            }
        }
    }
}
