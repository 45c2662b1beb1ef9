//! The pass scheduler's rules: rows go to jobs in batches of a bounded size, a work pass takes
//! only the rows it wants (each copy of a row once), and results are committed in the order
//! their jobs started, whatever order the threads finish them in.

use super::*;

fn line(file: usize, row: u64, bytes: usize) -> RawRow {
    RawRow {
        file,
        row,
        line: Some(row + 1),
        record: Record::Line(vec![b'x'; bytes]),
    }
}

fn rows_of(batch: &[RawRow]) -> Vec<u64> {
    batch.iter().map(|r| r.row).collect()
}

#[test]
fn results_are_committed_in_start_order_whatever_order_they_finish_in() {
    let mut in_order = InOrder::default();
    let mut committed = Vec::new();
    for (seq, result) in [(2, "c"), (0, "a"), (3, "d"), (1, "b"), (5, "f")] {
        in_order.insert(seq, result);
        while let Some(due) = in_order.next_due() {
            committed.push((seq, due));
        }
    }
    // "a" is due as soon as it arrives, "b" brings "c" and "d" with it; "f" waits for job 4.
    assert_eq!(
        committed,
        [(0, "a"), (1, "b"), (1, "c"), (1, "d")],
        "(arrival that made it due, result)"
    );
    assert_eq!(in_order.committed(), 4);
    in_order.insert(4, "e");
    assert_eq!(in_order.next_due(), Some("e"));
    assert_eq!(in_order.next_due(), Some("f"));
    assert_eq!(in_order.next_due(), None);
    assert_eq!(in_order.committed(), 6);
}

#[test]
fn a_batch_is_full_at_its_row_count_or_its_bytes() {
    // Small rows: full at JOB_MAX_ROWS rows exactly.
    let mut batch = Batch::default();
    for row in 0..JOB_MAX_ROWS as u64 - 1 {
        assert!(batch.push(line(0, row, 10)).is_none());
    }
    let full = batch
        .push(line(0, JOB_MAX_ROWS as u64 - 1, 10))
        .expect("full at the row count");
    assert_eq!(
        rows_of(&full),
        (0..JOB_MAX_ROWS as u64).collect::<Vec<u64>>()
    );
    // The next batch starts empty, its bytes counted from zero.
    let quarter = JOB_BYTES / 4;
    for row in 0..3 {
        assert!(batch.push(line(1, row, quarter)).is_none(), "row {row}");
    }
    let full = batch.push(line(1, 3, quarter)).expect("full at JOB_BYTES");
    assert_eq!(rows_of(&full), [0, 1, 2, 3]);
    // One row over the byte limit is a batch on its own; what is left comes out at the end.
    assert_eq!(
        rows_of(&batch.push(line(2, 0, JOB_BYTES + 1)).expect("alone")),
        [0]
    );
    assert!(batch.push(line(2, 1, 1)).is_none());
    assert_eq!(rows_of(&batch.finish().expect("the rest")), [1]);
    assert!(
        Batch::default().finish().is_none(),
        "an empty batch is no job"
    );
}

#[test]
fn a_work_pass_takes_only_the_rows_it_wants() {
    let wanted = [
        Wanted {
            file: 0,
            row: 2,
            copy: 0,
        },
        Wanted {
            file: 0,
            row: 2,
            copy: 3,
        },
        Wanted {
            file: 0,
            row: 7,
            copy: 0,
        },
        Wanted {
            file: 1,
            row: 0,
            copy: 1,
        },
    ];
    let taken: Vec<(usize, u64)> = [(0, 1), (0, 2), (0, 3), (0, 7), (1, 0), (1, 2), (2, 0)]
        .into_iter()
        .filter(|&(file, row)| !unwanted(Some(&wanted), &line(file, row, 1)))
        .collect();
    assert_eq!(taken, [(0, 2), (0, 7), (1, 0)]);
    // A blank line shares the next record's index: never worked, even at a wanted index.
    let blank = RawRow {
        file: 0,
        row: 7,
        line: Some(9),
        record: Record::Blank,
    };
    assert!(unwanted(Some(&wanted), &blank));
    // A scan (no list) takes every row, blank lines included (they are counted).
    assert!(!unwanted(None, &blank));
    assert!(!unwanted(None, &line(9, 9, 1)));

    assert_eq!(copies_of(&wanted, 0, 2), [0, 3]);
    assert_eq!(copies_of(&wanted, 1, 0), [1]);
    assert_eq!(copies_of(&wanted, 0, 3), Vec::<u32>::new());
    // The first n distinct rows take their copies with them.
    assert_eq!(distinct_prefix(&wanted, 0), 0);
    assert_eq!(distinct_prefix(&wanted, 1), 2);
    assert_eq!(distinct_prefix(&wanted, 2), 3);
    assert_eq!(distinct_prefix(&wanted, 99), 4);
}
