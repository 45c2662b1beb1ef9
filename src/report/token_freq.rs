//! Token frequencies in the file format speculators reads: `token_freq.pt`, what
//! `torch.save({token_id: count, ...})` writes (speculators' `save_token_frequency_distribution`;
//! read with `torch.load(path, weights_only=True)` by its `train.py` and
//! `build_vocab_mapping.py`). The file is a zip of stored records under one folder, as
//! PyTorch lays it out; `data.pkl` is the dict pickled with protocol 2 exactly as Python's
//! pickler writes it (ids ascending, only ids that occur). No timestamps and a serialization id
//! derived from the content, so the bytes depend only on the counts.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// Python's pickler puts at most this many items between a MARK and SETITEMS.
const BATCH: usize = 1000;

/// `pickle.dumps({id: count for id, count in enumerate(freq) if count}, protocol=2)`.
pub fn pickle_counts(freq: &[u64]) -> Vec<u8> {
    let mut out = vec![0x80, 2, b'}', b'q', 0];
    let items: Vec<(u64, u64)> = freq
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(id, &c)| (id as u64, c))
        .collect();
    for chunk in items.chunks(BATCH) {
        // A batch of one is written as SETITEM, like Python does.
        if chunk.len() > 1 {
            out.push(b'(');
        }
        for &(id, count) in chunk {
            pickle_int(&mut out, id);
            pickle_int(&mut out, count);
        }
        out.push(if chunk.len() > 1 { b'u' } else { b's' });
    }
    out.push(b'.');
    out
}

/// An int as Python's protocol-2 pickler writes a non-negative one.
fn pickle_int(out: &mut Vec<u8>, v: u64) {
    if v < 0x100 {
        out.extend([b'K', v as u8]);
    } else if v < 0x1_0000 {
        out.push(b'M');
        out.extend((v as u16).to_le_bytes());
    } else if v < 0x8000_0000 {
        out.push(b'J');
        out.extend((v as u32).to_le_bytes());
    } else {
        // LONG1: little-endian two's complement, as few bytes as keep the sign bit clear.
        let mut bytes = v.to_le_bytes().to_vec();
        while bytes.len() > 1 && bytes[bytes.len() - 1] == 0 && bytes[bytes.len() - 2] < 0x80 {
            bytes.pop();
        }
        if bytes[bytes.len() - 1] >= 0x80 {
            bytes.push(0);
        }
        out.extend([0x8a, bytes.len() as u8]);
        out.extend(bytes);
    }
}

/// Writes `{id: count}` for the ids with a non-zero count as a `torch.save` file.
pub fn write_pt(path: &Path, freq: &[u64]) -> Result<()> {
    let folder = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("archive");
    let bytes = torch_zip(folder, &pickle_counts(freq), &[])?;
    crate::model::nofollow::write(path, &bytes)
        .with_context(|| format!("failed to write `{}`", path.display()))
}

/// A 1-D CPU tensor for [`pickle_tensor_dict`]: its storage class (`LongStorage`,
/// `BoolStorage`, ...) and element count; its bytes go in the zip's `data/<index>` record.
pub struct Tensor1d<'a> {
    pub storage: &'a str,
    pub len: usize,
}

/// The pickle `torch.save({name: tensor, ...})` writes (protocol 2) for 1-D contiguous CPU
/// tensors, storage `i` being the zip's `data/i`: each tensor is
/// `torch._utils._rebuild_tensor_v2(storage, 0, (len,), (1,), False, OrderedDict())` with the
/// storage a persistent id `('storage', torch.<Storage>, 'i', 'cpu', len)`. Python's pickler
/// also memoizes objects (BINPUT); the unpickler does not need that, so it is left out.
pub fn pickle_tensor_dict(items: &[(&str, Tensor1d)]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.push(b'X');
        out.extend((s.len() as u32).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = vec![0x80, 2, b'}'];
    if !items.is_empty() {
        out.push(b'(');
    }
    for (key, (name, tensor)) in items.iter().enumerate() {
        string(&mut out, name);
        out.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(");
        out.push(b'(');
        string(&mut out, "storage");
        out.extend(format!("ctorch\n{}\n", tensor.storage).as_bytes());
        string(&mut out, &key.to_string());
        string(&mut out, "cpu");
        pickle_int(&mut out, tensor.len as u64);
        out.extend(b"tQ"); // TUPLE, BINPERSID
        pickle_int(&mut out, 0);
        pickle_int(&mut out, tensor.len as u64);
        out.push(0x85); // TUPLE1: the size
        pickle_int(&mut out, 1);
        out.push(0x85); // the stride
        out.push(0x89); // NEWFALSE: requires_grad
        out.extend(b"ccollections\nOrderedDict\n)R"); // backward hooks
        out.extend(b"tR");
    }
    if !items.is_empty() {
        out.push(b'u');
    }
    out.push(b'.');
    out
}

/// The bytes of a `torch.save` file whose records sit under `folder/` (PyTorch uses the file
/// stem): `pickle` as its `data.pkl` and `storages[i]` as `data/i`, in the record order and
/// 64-byte alignment PyTorch uses.
pub fn torch_zip(folder: &str, pickle: &[u8], storages: &[&[u8]]) -> Result<Vec<u8>> {
    // PyTorch writes a random 40-digit id; this one is derived from the content.
    let mut hasher = Sha256::new();
    hasher.update(pickle);
    for data in storages {
        hasher.update(data);
    }
    let id: String = hasher
        .finalize()
        .iter()
        .take(20)
        .map(|b| format!("{:02}", b % 100))
        .collect();
    let mut records: Vec<(String, &[u8])> = vec![
        ("data.pkl".into(), pickle),
        (".format_version".into(), b"1"),
        (".storage_alignment".into(), b"64"),
        ("byteorder".into(), b"little"),
    ];
    records.extend(
        storages
            .iter()
            .enumerate()
            .map(|(i, data)| (format!("data/{i}"), *data)),
    );
    records.push(("version".into(), b"3\n"));
    records.push((".data/serialization_id".into(), id.as_bytes()));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default())
        // PyTorch aligns every record to 64 bytes (it memory-maps tensor storages).
        .with_alignment(64);
    for (name, bytes) in records {
        zip.start_file(format!("{folder}/{name}"), options)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

/// Reads a `torch.save`d `{int: int}` dict (ours, or one speculators wrote).
pub fn read_pt(path: &Path) -> Result<BTreeMap<u64, u64>> {
    let context = || format!("failed to read `{}`", path.display());
    let file = std::fs::File::open(path).with_context(context)?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .with_context(|| format!("`{}` is not a torch.save file (zip)", path.display()))?;
    let name = zip
        .file_names()
        .filter_map(|n| n.ok())
        .find(|n| n.ends_with("/data.pkl"))
        .map(|n| n.into_owned())
        .with_context(|| format!("`{}` has no data.pkl record", path.display()))?;
    let mut pickle = Vec::new();
    zip.by_name(&name)
        .with_context(context)?
        .take(1 << 30)
        .read_to_end(&mut pickle)
        .with_context(context)?;
    unpickle_counts(&pickle).with_context(|| format!("in `{}` ({name})", path.display()))
}

/// The pickle of a dict of non-negative ints: the opcodes Python's pickler (protocols 2–5)
/// uses for one; anything else is an error.
fn unpickle_counts(p: &[u8]) -> Result<BTreeMap<u64, u64>> {
    #[derive(Clone, Copy)]
    enum Item {
        Mark,
        Int(u64),
        Dict,
    }
    let mut stack: Vec<Item> = Vec::new();
    let mut dict = BTreeMap::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let s = p.get(*at..*at + n).context("truncated pickle")?;
        *at += n;
        Ok(s)
    };
    loop {
        let op = *take(&mut at, 1)?.first().context("truncated pickle")?;
        match op {
            0x80 => {
                take(&mut at, 1)?;
            }
            0x95 => {
                take(&mut at, 8)?; // FRAME
            }
            b'q' => {
                take(&mut at, 1)?; // BINPUT
            }
            b'r' => {
                take(&mut at, 4)?; // LONG_BINPUT
            }
            0x94 => {} // MEMOIZE
            b'}' => stack.push(Item::Dict),
            b'(' => stack.push(Item::Mark),
            b'K' => stack.push(Item::Int(u64::from(take(&mut at, 1)?[0]))),
            b'M' => {
                let b = take(&mut at, 2)?;
                stack.push(Item::Int(u64::from(u16::from_le_bytes([b[0], b[1]]))));
            }
            b'J' => {
                let b = take(&mut at, 4)?;
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                stack.push(Item::Int(
                    u64::try_from(v).context("negative int in the counts")?,
                ));
            }
            0x8a => {
                let n = usize::from(take(&mut at, 1)?[0]);
                let b = take(&mut at, n)?;
                if n > 9 || (n == 9 && b[8] != 0) || b.last().is_some_and(|&x| x >= 0x80) {
                    bail!("an int in the counts is negative or does not fit 64 bits");
                }
                let mut v = [0u8; 8];
                v[..n.min(8)].copy_from_slice(&b[..n.min(8)]);
                stack.push(Item::Int(u64::from_le_bytes(v)));
            }
            b's' | b'u' => {
                let start = if op == b's' {
                    stack
                        .len()
                        .checked_sub(2)
                        .context("SETITEM on a short stack")?
                } else {
                    let mark = stack
                        .iter()
                        .rposition(|i| matches!(i, Item::Mark))
                        .context("SETITEMS without MARK")?;
                    stack.remove(mark);
                    mark
                };
                let items = stack.split_off(start);
                if !matches!(stack.last(), Some(Item::Dict)) || !items.len().is_multiple_of(2) {
                    bail!("not a dict of int counts");
                }
                for pair in items.chunks_exact(2) {
                    match (pair[0], pair[1]) {
                        (Item::Int(k), Item::Int(v)) => {
                            dict.insert(k, v);
                        }
                        _ => bail!("not a dict of int counts"),
                    }
                }
            }
            b'.' => {
                return match stack.as_slice() {
                    [Item::Dict] => Ok(dict),
                    _ => bail!("the pickle is not a single dict of int counts"),
                };
            }
            other => bail!("unexpected pickle opcode 0x{other:02x}: not a dict of int counts"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_are_pickled_as_python_does() {
        // pickle.dumps({1: 2, 5: 3000000000, 0: 7}, protocol=2) for ascending ids
        // {0: 7, 1: 2, 5: 3000000000}.
        let mut freq = vec![7u64, 2, 0, 0, 0, 3_000_000_000];
        assert_eq!(
            pickle_counts(&freq),
            b"\x80\x02}q\x00(K\x00K\x07K\x01K\x02K\x05\x8a\x05\x00^\xd0\xb2\x00u.".to_vec()
        );
        freq = vec![0, 300, 0];
        assert_eq!(
            pickle_counts(&freq),
            b"\x80\x02}q\x00K\x01M,\x01s.".to_vec()
        );
        assert_eq!(pickle_counts(&[0, 0]), b"\x80\x02}q\x00.".to_vec());
        let mut big = Vec::new();
        pickle_int(&mut big, 70_000);
        pickle_int(&mut big, 0x8000_0000);
        pickle_int(&mut big, u64::MAX);
        assert_eq!(
            big,
            b"J\x70\x11\x01\x00\x8a\x05\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"
                .to_vec()
        );
    }

    #[test]
    fn a_written_file_reads_back_including_batches_over_a_thousand() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token_freq.pt");
        let mut freq: Vec<u64> = (0..2500u64).map(|i| i % 3 * (i + 1)).collect();
        freq.push(u64::MAX);
        write_pt(&path, &freq).expect("write");
        let back = read_pt(&path).expect("read");
        let want: BTreeMap<u64, u64> = freq
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (i as u64, c))
            .collect();
        assert_eq!(back, want);
        let again = dir.path().join("again.pt");
        write_pt(&again, &freq).expect("write");
        // Same counts, same bytes.
        let b = std::fs::read(&again).expect("read");
        write_pt(&again, &freq).expect("write");
        assert_eq!(std::fs::read(&again).expect("read"), b);
    }

    #[test]
    fn other_pickles_are_refused() {
        assert!(unpickle_counts(b"\x80\x02]q\x00.").is_err()); // a list
        assert!(unpickle_counts(b"\x80\x02}q\x00K\x01X\x01\x00\x00\x00as.").is_err()); // str value
        assert!(unpickle_counts(b"\x80\x02}q\x00K\x01").is_err()); // truncated
        assert_eq!(
            unpickle_counts(b"\x80\x02}q\x00K\x01M,\x01s.").expect("ok"),
            BTreeMap::from([(1, 300)])
        );
    }
}
