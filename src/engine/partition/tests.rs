//! Part shares: every line, row group and whole file goes to exactly one part, by a rule that
//! depends only on the file's size or row groups and the part count.

use super::*;

fn part(index: usize, count: usize) -> PartSpec {
    PartSpec::new(index, count).expect("part")
}

#[test]
fn lines_are_cut_into_equal_byte_ranges_that_cover_the_file() {
    let ranges = |size: u64, count: usize| -> Vec<(u64, u64)> {
        (0..count)
            .map(
                |i| match share(&Splitting::Lines, size, 0, part(i, count)) {
                    FileSample::LineRange { lo, hi } => (lo, hi),
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    };
    assert_eq!(ranges(10, 1), [(0, 10)]);
    assert_eq!(ranges(10, 3), [(0, 3), (3, 6), (6, 10)]);
    assert_eq!(ranges(2, 3), [(0, 0), (0, 1), (1, 2)]);
    // A file larger than u64::MAX / N still cuts exactly (the product is taken in u128).
    let big = u64::MAX - 1;
    assert_eq!(
        ranges(big, 7)[6],
        ((u128::from(big) * 6 / 7) as u64, big),
        "the last range ends at the end"
    );
    for (size, count) in [(0, 4), (1, 1), (17, 5), (1000, 7), (999_983, 64)] {
        let r = ranges(size, count);
        assert_eq!(r[0].0, 0);
        assert_eq!(r[count - 1].1, size);
        assert!(
            r.windows(2).all(|w| w[0].1 == w[1].0),
            "{size}/{count}: {r:?}"
        );
    }
}

#[test]
fn a_row_group_goes_to_the_part_whose_share_holds_its_first_row() {
    let groups = Splitting::RowGroups(vec![4, 4, 1, 3]);
    let rows = |index, count| match share(&groups, 0, 0, part(index, count)) {
        FileSample::Records(rows) => rows,
        other => panic!("{other:?}"),
    };
    // 12 rows, 2 parts: groups start at rows 0, 4, 8, 9; part 1's share is rows 6..12.
    assert_eq!(rows(0, 2), (0..8).collect::<Vec<u64>>());
    assert_eq!(rows(1, 2), (8..12).collect::<Vec<u64>>());
    // 3 parts (shares 0..4, 4..8, 8..12): one group each, the last two together.
    assert_eq!(rows(0, 3), (0..4).collect::<Vec<u64>>());
    assert_eq!(rows(1, 3), (4..8).collect::<Vec<u64>>());
    assert_eq!(rows(2, 3), (8..12).collect::<Vec<u64>>());
    // More parts than groups: some parts read nothing, every row is read once.
    let mut all: Vec<u64> = (0..7).flat_map(|i| rows(i, 7)).collect();
    all.sort_unstable();
    assert_eq!(all, (0..12).collect::<Vec<u64>>());
    assert_eq!(rows(1, 7), Vec::<u64>::new());
    // No rows at all: nothing to read, and no division by zero.
    assert_eq!(
        share(&Splitting::RowGroups(vec![]), 0, 0, part(0, 2)),
        FileSample::Records(vec![])
    );
}

#[test]
fn whole_files_are_dealt_round_robin() {
    let owner = |whole: usize, count: usize| -> Vec<usize> {
        (0..count)
            .filter(|&i| share(&Splitting::Whole, 0, whole, part(i, count)) == FileSample::All)
            .collect()
    };
    assert_eq!(owner(0, 3), [0]);
    assert_eq!(owner(1, 3), [1]);
    assert_eq!(owner(2, 3), [2]);
    assert_eq!(owner(3, 3), [0]);
    assert_eq!(owner(5, 1), [0]);
    assert_eq!(
        share(&Splitting::Whole, 0, 0, part(1, 3)),
        FileSample::Records(vec![])
    );
}

#[test]
fn part_specs_name_their_files_and_refuse_what_does_not_exist() {
    assert_eq!(
        PartSpec::parse(" 2 / 5").map(|p| (p.index, p.count)),
        Ok((2, 5))
    );
    assert_eq!(part(2, 5).file_name(), "part-00002-of-00005.bin");
    assert_eq!(
        PartSpec::parse("5/5"),
        Err("part 5 of 5 does not exist: parts are numbered 0 to 4".to_owned())
    );
    assert_eq!(
        PartSpec::parse("0/0"),
        Err("the part count must be 1 to 100000 (it is 0)".to_owned())
    );
    assert_eq!(
        PartSpec::parse("1-3"),
        Err("`--part` takes I/N, part I (from 0) of N parts (not `1-3`)".to_owned())
    );
    assert_eq!(
        default_parts_dir(Path::new("/data/out/demo")),
        Path::new("/data/out/demo.parts")
    );
}
