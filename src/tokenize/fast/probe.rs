//! The probe corpus of the load-time self-check: short texts aimed at every branch where a
//! reimplementation of the `tokenizers` pipeline could go wrong.

/// Probe texts, including every added token (`added_tokens`, by content) embedded in text.
pub fn probe_texts(added_tokens: &[String]) -> Vec<String> {
    let mut texts: Vec<String> = FIXED.iter().map(|s| (*s).to_owned()).collect();

    // Long runs: whitespace, digits, letters without a vocabulary token (long BPE merges).
    for n in [2, 3, 4, 7, 8, 16, 31, 64, 65, 200] {
        texts.push(format!("a{}b", " ".repeat(n)));
        texts.push(format!("x{}\ny", " ".repeat(n)));
        texts.push(format!("{}end", "\t".repeat(n)));
        texts.push(format!("{}z", "\n".repeat(n)));
        texts.push("7".repeat(n));
        texts.push("ab".repeat(n));
    }
    texts.push(" \t \n\t \r\n   \u{a0}\u{3000}x  ".repeat(20));
    texts.push("的".repeat(100));
    texts
        .push("中文字符没有标点符号的长句子会成为一个很长的预分词片段需要完整的合并过程".repeat(3));
    texts.push("ㅋ".repeat(70));
    texts.push("\u{1f600}".repeat(40));

    // Every added token inside text, next to spaces, newlines, itself, and a combining mark that
    // NFC over the whole text (instead of per piece) would fuse with the token's last character.
    for token in added_tokens {
        texts.push(format!("a{token}b"));
        texts.push(format!("Hello {token} world\n{token}\n"));
        texts.push(format!("{token}{token}x{token}"));
        texts.push(format!("{token}\u{338}e\u{301}"));
        if let Some(partial) = token.get(..token.len().saturating_sub(1)) {
            texts.push(format!("{partial} {partial}{token}"));
        }
    }
    let mut all = String::new();
    for token in added_tokens {
        all.push_str(token);
        all.push_str("text ");
    }
    texts.push(all);

    // Every ASCII character, and each after an apostrophe and a space.
    let ascii: String = (0u8..128).map(char::from).collect();
    texts.push(ascii.clone());
    texts.push(ascii.chars().map(|c| format!("'{c} {c}")).collect());
    texts
}

const FIXED: &[&str] = &[
    "",
    " ",
    "\n",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    // Contractions in every case, and lookalikes.
    "I'm sure they'LL say it's fine; WE'RE done, you'VE seen 'S and 'd. DON'T can't I'D He'S",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'Re 'rE 'lL 'x 'sa 'ss ' s",
    "'ſ 'ſt Iſ'ſ 'K 'k 'İ 'ı ''s '''ll",
    // Scripts, marks, emoji.
    "你好，世界！这是一个测试。今天天气很好，我们去公园散步吧。",
    "こんにちは、世界。カタカナとひらがなと漢字を混ぜた文章です。",
    "안녕하세요 세계! 한국어 문장입니다. 띄어쓰기도 있어요.",
    "مرحبا بالعالم! هذه جملة عربية مع تشكيل: مُحَمَّدٌ رَسُولُ",
    "नमस्ते दुनिया! यह हिंदी का वाक्य है। क्षत्रिय ज्ञान",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Привет, мир! Ёжик в тумане. Ελληνικά γράμματα: αβγδ. שלום עולם",
    "Emoji: 👋🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪🇯🇵 ❤️ ✓ ✔︎ 1️⃣ 🧑🏿‍🚀",
    "mixed😀text👍🏽here🎉!!",
    // Decomposed text that NFC changes, and text it leaves alone.
    "Cafe\u{301} nai\u{308}ve re\u{301}sume\u{301} A\u{30a}ngstro\u{308}m",
    "\u{212b} \u{2126} \u{1100}\u{1161}\u{11a8} \u{fb01} \u{344} \u{958} \u{f900}",
    "a\u{323}\u{307} a\u{307}\u{323} q\u{307}\u{323} \u{1e0b}\u{323} o\u{31b}\u{323}",
    "\u{301}leading mark, mark after space \u{301}, after digit 1\u{301}, after punct .\u{301}",
    "e\u{301}\u{301}\u{301}\u{301} \u{5d0}\u{5b7}\u{5bc} \u{915}\u{93c}",
    // Code.
    "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{x:?}\");\n}\n",
    "def f(a, b=2, *args, **kw):\n\tif a >= b:\n\t\treturn a ** 2  # square\n\treturn None\n\n\n",
    "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\\n\"}}",
    "<div class=\"x\">&nbsp;&amp;</div>\r\n<script>if(a&&b||!c){x+=1;}</script>",
    "#!/bin/bash\nfor f in *.txt; do echo \"$f\" | sed 's/a/b/g' >> out.log 2>&1; done",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "x=1;y=2;;;z=x+y\n\n\n    \n\t\n  return",
    // Digits.
    "1234567890 3.14159 -42 1e-9 0x1F 1,000,000 ١٢٣٤ ²³ Ⅻ １２３ ๑๒๓",
    "Version 2.0.1-beta+build.123 released on 2024-01-15T10:30:00Z",
    // Whitespace of every kind.
    "a\u{a0}b\u{2003}c\u{3000}d\u{85}e\u{2028}f\u{2029}g\u{b}h\u{c}i\u{1680}j\u{202f}k",
    "  leading and trailing  ",
    "\r\n\r\nwindows\r\nlines\r\n",
    "tabs\tand\t\tspaces  \t  mixed \t\n\t end",
    " !\" ?\n\n!?\r\n(x)\n\n[y]  \n{z}",
    // Controls, private use, unassigned, noncharacters, the last scalar values.
    "\u{0}\u{1}\u{1f}\u{7f}\u{80}\u{9f}\u{e000}\u{f8ff}\u{378}\u{fdd0}\u{fffe}\u{10ffff}\u{e0001}",
    "zero\u{200b}width\u{200c}non\u{200d}joiner\u{2060}word\u{feff}bom",
];
