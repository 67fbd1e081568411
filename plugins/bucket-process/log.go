package processbucket

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// output writes each line a provider prints to the node's log. go-plugin
// hands over three streams: the process's stderr (where the Go runtime
// writes a crash), and what Go code writes to os.Stdout and os.Stderr once
// go-plugin's Serve has replaced them with pipes.
type output struct {
	log    *slog.Logger
	stream string
	tail   *tail

	mu   sync.Mutex
	line bytes.Buffer
}

func (w *output) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			w.line.WriteByte(b)
			continue
		}
		line := w.line.String()
		w.line.Reset()
		w.log.Info("bucket provider output", "stream", w.stream, "line", line)
		w.tail.add(line)
	}
	return len(p), nil
}

// tail keeps a provider's last few lines of output for error messages: a
// provider that fails to start or crashes usually says why there.
type tail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 5

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == tailLines {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, line)
}

// String is the tail for an error message, "" if there is none.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return "; its last output: " + strings.Join(t.lines, " | ")
}

// hclogSlog gives go-plugin's own messages (a provider's exit, a failed
// graceful stop) to the node's slog logger. go-plugin also parses the
// provider's stderr into a sub-logger (Named); output has those lines
// already, verbatim, so sub-loggers discard.
type hclogSlog struct {
	log   *slog.Logger
	level hclog.Level
}

var _ hclog.Logger = (*hclogSlog)(nil)

func (l *hclogSlog) Log(level hclog.Level, msg string, args ...any) {
	if level < l.level {
		return
	}
	sl := slog.LevelInfo
	switch {
	case level <= hclog.Debug:
		sl = slog.LevelDebug
	case level == hclog.Warn:
		sl = slog.LevelWarn
	case level >= hclog.Error:
		sl = slog.LevelError
	}
	l.log.Log(context.Background(), sl, "go-plugin: "+msg, args...)
}

func (l *hclogSlog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogSlog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogSlog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogSlog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogSlog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }
func (l *hclogSlog) IsTrace() bool                 { return l.level <= hclog.Trace }
func (l *hclogSlog) IsDebug() bool                 { return l.level <= hclog.Debug }
func (l *hclogSlog) IsInfo() bool                  { return l.level <= hclog.Info }
func (l *hclogSlog) IsWarn() bool                  { return l.level <= hclog.Warn }
func (l *hclogSlog) IsError() bool                 { return l.level <= hclog.Error }
func (l *hclogSlog) ImpliedArgs() []any            { return nil }
func (l *hclogSlog) With(args ...any) hclog.Logger {
	return &hclogSlog{log: l.log.With(args...), level: l.level}
}
func (l *hclogSlog) Name() string                   { return "" }
func (l *hclogSlog) Named(string) hclog.Logger      { return hclog.NewNullLogger() }
func (l *hclogSlog) ResetNamed(string) hclog.Logger { return hclog.NewNullLogger() }
func (l *hclogSlog) SetLevel(level hclog.Level)     { l.level = level }
func (l *hclogSlog) GetLevel() hclog.Level          { return l.level }
func (l *hclogSlog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.Info(strings.TrimSuffix(string(p), "\n"))
		return len(p), nil
	})
}
func (l *hclogSlog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
