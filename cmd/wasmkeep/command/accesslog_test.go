package command

import "testing"

func TestActorOf(t *testing.T) {
	for path, want := range map[string]string{
		"/actor/counter/alice":         "counter/alice",
		"/actor/counter/alice/":        "counter/alice",
		"/actor/app/main/jobs/1":       "app/main",
		"/actor/counter":               "",
		"/actor//alice":                "",
		"/actor/counter/":              "",
		"/_wasmkeep/ready":             "",
		"/static/actor/counter/alice/": "",
	} {
		if got, ok := actorOf(path); got != want || ok != (want != "") {
			t.Errorf("actorOf(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
}
