package measure

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PrintTable prints the rows of results from Run side by side, one value
// column per engine, then the ratio of each later engine to the first.
func PrintTable(w io.Writer, results ...Result) {
	if len(results) == 0 {
		return
	}
	first := results[0]
	fmt.Fprintf(w, "%-34s %-7s", "metric", "unit")
	for _, r := range results {
		fmt.Fprintf(w, " %*s", width(r.Engine), r.Engine)
	}
	for _, r := range results[1:] {
		label := r.Engine + "/" + first.Engine
		fmt.Fprintf(w, " %*s", width(label), label)
	}
	fmt.Fprintln(w)
	// Every Result from Run has the same rows in the same order.
	for i, row := range first.Rows {
		fmt.Fprintf(w, "%-34s %-7s", row.Metric, row.Unit)
		for _, r := range results {
			fmt.Fprintf(w, " %*s", width(r.Engine), formatValue(r.Rows[i].Value))
		}
		for _, r := range results[1:] {
			label := r.Engine + "/" + first.Engine
			fmt.Fprintf(w, " %*s", width(label), ratio(r.Rows[i].Value, row.Value))
		}
		fmt.Fprintln(w)
	}
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
// path. commit names the measured build, guest the measured actor.
func WriteCSV(dir, commit, suffix, guest string, results ...Result) (string, error) {
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
			w.Write([]string{date, commit, r.Engine, guest, m.Metric, formatValue(m.Value), m.Unit, r.DataFS, hp})
		}
	}
	w.Flush()
	return f.Name(), errors.Join(w.Error(), f.Close())
}
