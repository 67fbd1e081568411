package measure

import "time"

// Running is a server that a benchmark of its own drives (bench/cmd/wkhostile),
// started and stopped as Run does it.
type Running struct{ s *server }

// Start starts opts.Server with dataDir, its output going to logPath, and
// returns once opts.Read answers for actor x.
func Start(opts Options, dataDir, logPath string) (*Running, error) {
	s, _, err := startServer(opts, dataDir, logPath)
	if err != nil {
		return nil, err
	}
	return &Running{s}, nil
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (r *Running) URL() string { return r.s.Base }

// CPUTime is the CPU time the server process has used, user and system.
func (r *Running) CPUTime() (time.Duration, error) { return r.s.cpuTime() }

// Stop shuts the server down as an operator would (SIGTERM, then a kill
// after 20 s).
func (r *Running) Stop() error { return r.s.stop() }

// DataFS names the file system under dir, as Result.DataFS does.
func DataFS(dir string) string { return dataFS(dir) }

// Percentile is the nearest-rank q-quantile of ds.
func Percentile(ds []time.Duration, q float64) time.Duration { return percentile(ds, q) }
