package measure

import "testing"

func TestMedian(t *testing.T) {
	run := func(read, cpu float64) Result {
		return Result{Engine: "wazero", Rows: []Row{{"read_resident_p50", read, "us"}, {"server_cpu_per_request", cpu, "us"}}}
	}
	for _, tc := range []struct {
		runs      []Result
		read, cpu float64
	}{
		{[]Result{run(3, 10), run(1, 30), run(2, 20)}, 2, 20},
		{[]Result{run(4, 10), run(1, 40)}, 2.5, 25}, // an even count: the mean of the middle two
		{[]Result{run(7, 9)}, 7, 9},
	} {
		m, err := Median(tc.runs)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := m.Value("read_resident_p50"); got != tc.read {
			t.Errorf("median read of %v = %v, want %v", tc.runs, got, tc.read)
		}
		if got, _ := m.Value("server_cpu_per_request"); got != tc.cpu {
			t.Errorf("median CPU of %v = %v, want %v", tc.runs, got, tc.cpu)
		}
	}
	// The input is not sorted in place.
	runs := []Result{run(3, 10), run(1, 30)}
	Median(runs)
	if v, _ := runs[0].Value("read_resident_p50"); v != 3 {
		t.Errorf("Median changed its input: first run's read is now %v", v)
	}
	if _, err := Median([]Result{run(1, 1), {Engine: "wazero"}}); err == nil {
		t.Error("Median of runs with different rows: no error")
	}
	if _, err := Median(nil); err == nil {
		t.Error("Median of no runs: no error")
	}
}
