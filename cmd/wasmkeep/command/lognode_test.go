package command

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

// node_id stays at the top level of a line whatever groups and attributes
// a logger added (a plugin's WithGroup): fails with the group opened in
// the handler beneath, which nested node_id in it.
func TestNamingNodeKeepsNodeIDOnTop(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(namingNode{slog.NewJSONHandler(&buf, nil), "a", nil})
	log.With("plugin", "s3").WithGroup("req").With("id", 7).WithGroup("retry").Info("put", "try", 2)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	req, _ := line["req"].(map[string]any)
	retry, _ := req["retry"].(map[string]any)
	if line["node_id"] != "a" || line["plugin"] != "s3" || req["id"] != float64(7) || retry["try"] != float64(2) || req["node_id"] != nil || retry["node_id"] != nil {
		t.Errorf("the line: %s, want node_id and plugin on top, req.id and req.retry.try nested", buf.Bytes())
	}
}
