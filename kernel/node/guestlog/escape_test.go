package guestlog

import "testing"

// A panic trace's tabs reach the log as the handler writes a tab (\t), while
// what could forge an entry or drive a terminal stays escaped.
func TestGuestLogKeepsTabsEscapesControls(t *testing.T) {
	n, buf := logSink(10)
	l := n.NewLimit("t/c/a")
	out := NewStream(&l, "stderr")
	out.Write([]byte("\tmain.go:12 +0x1f\n"))
	out.Write([]byte("forged\rlevel=ERROR \x1b[2J \xff\n"))
	want := `level=INFO msg="\tmain.go:12 +0x1f" actor=t/c/a stream=stderr` + "\n" +
		`level=INFO msg="forged\\u{d}level=ERROR \\u{1b}[2J \\x{ff}" actor=t/c/a stream=stderr` + "\n"
	if buf.String() != want {
		t.Fatalf("log:\n%s\nwant:\n%s", buf, want)
	}
}

func TestEscapeLine(t *testing.T) {
	if got := escapeLine([]byte("ok \x1b[31m\xff")); got != `ok \u{1b}[31m\x{ff}` {
		t.Errorf("got %q", got)
	}
}
