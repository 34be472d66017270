//! Column alignment exactly as Go's `text/tabwriter` does it (left-aligned, space padding), so
//! that tables and `describe` line up the way kubectl's do: cells end with `\t`, a column block
//! is a run of consecutive lines that all have a cell in that column, and the text after a
//! line's last tab is never padded.

/// kubectl get's writer: `tabwriter.NewWriter(out, 10, 4, 3, ' ', 0)`.
pub const TABLE: Settings = Settings {
    min_width: 10,
    padding: 3,
};

/// kubectl describe's writer: `tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)`.
pub const DESCRIBE: Settings = Settings {
    min_width: 0,
    padding: 2,
};

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub min_width: usize,
    pub padding: usize,
}

/// Aligns `text` (lines of tab-terminated cells).
pub fn align(text: &str, settings: Settings) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut widths = Vec::new();
    format(&lines, 0, lines.len(), &mut widths, settings, &mut out);
    out.join("\n")
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn format(
    lines: &[Vec<&str>],
    mut line0: usize,
    line1: usize,
    widths: &mut Vec<usize>,
    settings: Settings,
    out: &mut Vec<String>,
) {
    let column = widths.len();
    let mut this = line0;
    while this < line1 {
        if column + 1 >= lines[this].len() {
            this += 1;
            continue;
        }
        // A cell in this column: a block starts here, after the lines before it are written.
        write_lines(lines, line0, this, widths, out);
        line0 = this;
        let mut w = settings.min_width;
        while this < line1 && column + 1 < lines[this].len() {
            w = w.max(width(lines[this][column]) + settings.padding);
            this += 1;
        }
        widths.push(w);
        format(lines, line0, this, widths, settings, out);
        widths.pop();
        line0 = this;
    }
    write_lines(lines, line0, line1, widths, out);
}

fn write_lines(
    lines: &[Vec<&str>],
    line0: usize,
    line1: usize,
    widths: &[usize],
    out: &mut Vec<String>,
) {
    for line in &lines[line0..line1] {
        let mut s = String::new();
        for (j, cell) in line.iter().enumerate() {
            s.push_str(cell);
            if j + 1 < line.len() {
                if let Some(w) = widths.get(j) {
                    s.extend(std::iter::repeat_n(' ', w.saturating_sub(width(cell))));
                }
            }
        }
        out.push(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_have_kubectls_minimum_width_and_padding() {
        let t = align(
            "NAME\tREADY\tSTATUS\tRESTARTS\tAGE\nwar\t2/2\tRunning\t0\t5s\n",
            TABLE,
        );
        assert_eq!(
            t,
            "NAME      READY     STATUS    RESTARTS   AGE\nwar       2/2       Running   0          5s\n"
        );
    }

    #[test]
    fn blocks_end_at_a_line_without_the_column() {
        let t = align(
            "Name:\twar\nNamespace:\tdefault\nIPs:\n  IP:\t10.0.0.1\n",
            DESCRIBE,
        );
        assert_eq!(
            t,
            "Name:       war\nNamespace:  default\nIPs:\n  IP:  10.0.0.1\n"
        );
    }

    #[test]
    fn nested_columns_align_within_their_block() {
        let t = align("a\tbb\tc\naaa\tb\tcc\nx\n", DESCRIBE);
        assert_eq!(t, "a    bb  c\naaa  b   cc\nx\n");
    }

    #[test]
    fn trailing_text_is_not_padded() {
        assert_eq!(align("k\tv \n", DESCRIBE), "k  v \n");
    }
}
