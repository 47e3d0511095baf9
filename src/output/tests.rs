//! Unit tests of the output layer: tables, stacking, wrapping, CSV.

use super::*;

#[test]
fn csv_cells_that_look_like_formulas_are_neutralised() {
    let mut buf = Vec::new();
    let cells = ["=HYPERLINK(\"x\")", "+1", "-2", "@SUM(A1)", "ok", "a=b"];
    write_csv_line(&mut buf, cells.iter().map(|s| s.to_string())).unwrap();
    assert_eq!(
        String::from_utf8(buf).unwrap(),
        "\"'=HYPERLINK(\"\"x\"\")\",'+1,'-2,'@SUM(A1),ok,a=b\r\n"
    );
}

#[test]
fn narrow_rows_are_stacked_and_wrapped_at_words() {
    let mut buf = Vec::new();
    let cols = vec!["id".to_string(), "motivo".to_string()];
    let rows = vec![vec![
        "7".into(),
        "MemoryError: could not allocate the buffer".into(),
    ]];
    write_stacked(&mut buf, 24, &cols, rows.into_iter()).unwrap();
    assert_eq!(
        String::from_utf8(buf).unwrap(),
        "id:     7\nmotivo: MemoryError:\n        could not\n        allocate the\n        buffer\n\n"
    );
    assert_eq!(
        wrap("averyveryverylongword x", 10),
        vec!["averyveryv", "erylongwor", "d x"]
    );
}

#[test]
fn csv_quoting() {
    let mut buf = Vec::new();
    write_csv_line(
        &mut buf,
        [
            "a".to_string(),
            "b,c".into(),
            "say \"hi\"".into(),
            "l1\nl2".into(),
        ]
        .into_iter(),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(buf).unwrap(),
        "a,\"b,c\",\"say \"\"hi\"\"\",\"l1\nl2\"\r\n"
    );
}

#[test]
fn ellipsis() {
    assert_eq!(ellipsize("abcdef", 4), "abc…");
    assert_eq!(ellipsize("abc", 4), "abc");
}
