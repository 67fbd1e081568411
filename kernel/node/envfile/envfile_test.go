package envfile

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeEnv(t *testing.T, text string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "class.env")
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

func TestParse(t *testing.T) {
	path := writeEnv(t, strings.Join([]string{
		"# a comment",
		"; also a comment",
		"   # indented comment",
		"",
		"PLAIN=value",
		"export EXPORTED=yes",
		"export\tTABBED=yes",
		`DOUBLE="two words"`,
		`SINGLE='first'`,
		`SINGLE='say "hi"'`,
		`NOESC="a\nb $HOME ${X}"`,
		`UNQUOTED=a\tb $HOME 'q'`,
		"SPACED  =   padded value  ",
		`KEEPSPACE="  inner  "`,
		"EMPTY=",
		`EMPTYQ=""`,
		"TAB=a\tb",
		"HASH=a # not a comment",
		"EQ=a=b",
		"CRLF=line\r",
		"lower_9=x",
		"export=a name, not a prefix",
		"TWICE=first",
		"TWICE=second",
	}, "\n"), 0o600)
	vars, worldReadable, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if worldReadable {
		t.Error("a 0600 file reported readable by others")
	}
	want := map[string]string{
		"PLAIN":     "value",
		"EXPORTED":  "yes",
		"TABBED":    "yes",
		"DOUBLE":    "two words",
		"SINGLE":    `say "hi"`,
		"NOESC":     `a\nb $HOME ${X}`,
		"UNQUOTED":  `a\tb $HOME 'q'`,
		"SPACED":    "padded value",
		"KEEPSPACE": "  inner  ",
		"EMPTY":     "",
		"EMPTYQ":    "",
		"TAB":       "a\tb",
		"HASH":      "a # not a comment",
		"EQ":        "a=b",
		"CRLF":      "line",
		"lower_9":   "x",
		"export":    "a name, not a prefix",
		"TWICE":     "second",
	}
	if !maps.Equal(vars, want) {
		t.Errorf("got %q\nwant %q", vars, want)
	}
}

func TestParseWorldReadable(t *testing.T) {
	for mode, want := range map[os.FileMode]bool{0o600: false, 0o640: false, 0o604: true, 0o644: true} {
		_, got, err := Parse(writeEnv(t, "A=1\n", mode))
		if err != nil || got != want {
			t.Errorf("mode %o: world readable %v, %v; want %v", mode, got, err, want)
		}
	}
}

// A malformed line is reported by file and line number, never with its
// text: the line may hold a secret.
func TestParseErrors(t *testing.T) {
	const secret = "s3cr3t"
	for _, line := range []string{
		secret,                            // no =
		"=" + secret,                      // no name
		"MY-TOKEN=" + secret,              // - in the name
		"MY TOKEN=" + secret,              // space in the name
		"export =" + secret,               // no name after export
		secret + "\x00=x",                 // control character in the name
		`TOKEN="` + secret,                // unterminated
		`TOKEN='` + secret + `"`,          // quotes that do not match
		`TOKEN="` + secret + `" trailing`, // text after the closing quote
		`TOKEN="a"` + secret + `"`,        // a second pair of quotes
		"TOKEN=" + secret + "\x01",        // control character
		"TOKEN=" + secret + "\x7f",        // DEL
		"TOKEN=" + secret + "\rmore",      // a carriage return inside the line
		"TOKEN='" + secret + "\x1b[31m'",  // control character inside quotes
	} {
		path := writeEnv(t, "# first line\nOK=1\n"+line+"\nLATER=2\n", 0o600)
		vars, _, err := Parse(path)
		if err == nil {
			t.Errorf("line %q: accepted as %q", line, vars)
			continue
		}
		if !strings.HasPrefix(err.Error(), path+":3: ") || strings.Contains(err.Error(), secret) {
			t.Errorf("line %q: error %q; want it to start with %q and not hold the line's text", line, err, path+":3: ")
		}
	}
	if _, _, err := Parse(filepath.Join(t.TempDir(), "missing.env")); err == nil {
		t.Error("a missing file was accepted")
	}
}

// Format writes what ParseBytes reads back unchanged, whatever quotes a
// value holds, and the same values always as the same bytes.
func TestFormatRoundTrip(t *testing.T) {
	path := writeEnv(t, "# c\nB=it's\nA=\"plain \"\nC=a'b\"c\nD=\nE='x\"y'\n", 0o600)
	vars, _, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	b := Format(vars)
	if string(b) != "A='plain '\nB=\"it's\"\nC=a'b\"c\nD=''\nE='x\"y'\n" {
		t.Errorf("Format = %q", b)
	}
	back, err := ParseBytes("obj", b)
	if err != nil || !maps.Equal(back, vars) {
		t.Errorf("ParseBytes(Format) = %q, %v; want %q", back, err, vars)
	}
}

// A file over MaxSize is refused, naming it: a deployed .config is read
// whole by every node.
func TestParseMaxSize(t *testing.T) {
	if _, _, err := Parse(writeEnv(t, "A="+strings.Repeat("x", MaxSize-3)+"\n", 0o600)); err != nil {
		t.Errorf("a file of MaxSize bytes: %v", err)
	}
	path := writeEnv(t, "A="+strings.Repeat("x", MaxSize-2)+"\n", 0o600)
	if _, _, err := Parse(path); err == nil || !strings.Contains(err.Error(), path+": over ") {
		t.Errorf("a file of MaxSize+1 bytes: %v", err)
	}
}
