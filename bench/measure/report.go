package measure

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PrintTable prints the rows of results from Run side by side, one value
// column per result (its Label), then the ratio of each later result to the
// first. A row the first result lacks is left out; one a later result lacks
// reads "-".
func PrintTable(w io.Writer, results ...Result) {
	if len(results) == 0 {
		return
	}
	first := results[0]
	ratioLabel := func(r Result) string { return r.Label + "/" + first.Label }
	fmt.Fprintf(w, "%-34s %-7s", "metric", "unit")
	for _, r := range results {
		fmt.Fprintf(w, " %*s", width(r.Label), r.Label)
	}
	for _, r := range results[1:] {
		fmt.Fprintf(w, " %*s", width(ratioLabel(r)), ratioLabel(r))
	}
	fmt.Fprintln(w)
	for _, row := range first.Rows {
		fmt.Fprintf(w, "%-34s %-7s", row.Metric, row.Unit)
		for _, r := range results {
			cell := "-"
			if v, ok := r.Value(row.Metric); ok {
				cell = formatValue(v)
			}
			fmt.Fprintf(w, " %*s", width(r.Label), cell)
		}
		for _, r := range results[1:] {
			cell := "-"
			if v, ok := r.Value(row.Metric); ok {
				cell = ratio(v, row.Value)
			}
			fmt.Fprintf(w, " %*s", width(ratioLabel(r)), cell)
		}
		fmt.Fprintln(w)
	}
}

// Value is the result's row called metric.
func (r Result) Value(metric string) (float64, bool) {
	for _, row := range r.Rows {
		if row.Metric == metric {
			return row.Value, true
		}
	}
	return 0, false
}

// Median is, row by row, the median of runs of one server: the runs must
// have the same rows.
func Median(runs []Result) (Result, error) {
	if len(runs) == 0 {
		return Result{}, errors.New("no runs to take the median of")
	}
	m := runs[0]
	m.Rows = slices.Clone(m.Rows)
	for i, row := range m.Rows {
		vs := make([]float64, 0, len(runs))
		for _, r := range runs {
			v, ok := r.Value(row.Metric)
			if !ok {
				return Result{}, fmt.Errorf("%s: a run lacks %s", r.Label, row.Metric)
			}
			vs = append(vs, v)
		}
		slices.Sort(vs)
		n := len(vs)
		m.Rows[i].Value = (vs[(n-1)/2] + vs[n/2]) / 2
	}
	return m, nil
}

// width is a column's: its heading's, and room for a value.
func width(heading string) int { return max(len(heading), 10) }

// ratio is v/base, or "-" where that means nothing: a quick run's memory per
// actor can be zero or below.
func ratio(v, base float64) string {
	if base <= 0 || v < 0 {
		return "-"
	}
	return strconv.FormatFloat(v/base, 'f', 2, 64)
}

func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// WriteCSV writes dir/<date>-<commit><suffix>.csv, or -2, -3... if that
// file exists, with one row per metric of each result, and returns its
// path. commit names the measured build.
func WriteCSV(dir, commit, suffix string, results ...Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	date := time.Now().UTC().Format(time.DateOnly)
	name := date + "-" + commit + suffix
	var f *os.File
	for i := 1; ; i++ {
		path := filepath.Join(dir, name+".csv")
		if i > 1 {
			path = filepath.Join(dir, name+"-"+strconv.Itoa(i)+".csv")
		}
		var err error
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		break
	}
	w := csv.NewWriter(f)
	w.Write([]string{"date", "commit", "engine", "guest", "metric", "value", "unit", "data_fs", "thp"})
	hp := thp()
	for _, r := range results {
		for _, m := range r.Rows {
			w.Write([]string{date, commit, r.Engine, r.Guest, m.Metric, formatValue(m.Value), m.Unit, r.DataFS, hp})
		}
	}
	w.Flush()
	return f.Name(), errors.Join(w.Error(), f.Close())
}

// CheckoutCommit names the checkout the caller runs in, which bench/run.sh
// builds the servers from: its short hash, with -dirty if anything differs
// from it, untracked files included.
func CheckoutCommit() (string, error) {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --short HEAD (run inside the repository): %w", err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		return "", fmt.Errorf("git status: %w", err)
	}
	commit := strings.TrimSpace(string(rev))
	if len(bytes.TrimSpace(status)) > 0 {
		commit += "-dirty"
	}
	return commit, nil
}
