package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
)

// The Grafana dashboard and the Prometheus alert rules (deploy/) query only
// metrics, and labels of them, that a real node's page has (the book's
// the_grafana_dashboard_uses_only_metrics_that_exist and
// the_alert_rules_use_only_metrics_that_exist); and promtool, fed that page
// as it was scraped, fires no rule while nothing moves and, with every
// counter rising, exactly the rules whose counters the page has.
func TestDashboardAndAlertsUseTheMetricsPage(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b")
	b.args = append(b.args, "--metrics-listen", "127.0.0.1:0")
	startNodes(t, a, b)
	// A forward (x is a's), a durable write on b's own actor, a failed event.
	for _, s := range []struct{ method, url, node string }{
		{"POST", a.url + "/actor/counter/x", "a"},
		{"POST", b.url + "/actor/counter/x", "a"},
		{"POST", b.url + "/actor/counter/y/durable", "b"},
	} {
		if got := ask(t, s.method, s.url); got.code != 200 || got.node != s.node {
			t.Fatalf("%s %s: %+v, want 200 from %s", s.method, s.url, got, s.node)
		}
	}
	if got := ask(t, "GET", b.url+"/actor/probe/z/spin"); got.code != 500 {
		t.Fatalf("the spinning event: %+v, want 500", got)
	}
	page := parsePage(t, ask(t, "GET", "http://"+metricsAddr(t, b.logs)+"/metrics").body)

	root := repoRoot(t)
	dashboard, err := os.ReadFile(filepath.Join(root, "deploy/grafana/wasmkeep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var panels struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Definition string } }
	}
	if err := json.Unmarshal(dashboard, &panels); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range panels.Panels {
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, v := range panels.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	rulesPath := filepath.Join(root, "deploy/prometheus/alerts.yaml")
	rules := readRules(t, rulesPath)
	for _, r := range rules {
		exprs = append(exprs, r.expr)
	}
	if len(panels.Panels) < 20 || len(rules) < 8 {
		t.Fatalf("%d panels and %d rules read: the files' shape changed", len(panels.Panels), len(rules))
	}
	for _, e := range exprs {
		if err := page.queries(e); err != nil {
			t.Errorf("%v, in %q", err, e)
		}
	}

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool not in PATH (Debian's prometheus package has it; ./scripts/test installs it): the rules are not evaluated")
		}
		file := filepath.Join(t.TempDir(), "page_test.yaml")
		body, _ := json.Marshal(page.ruleTests(t, rulesPath, rules))
		if err := os.WriteFile(file, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
			t.Errorf("promtool test rules on the scraped page: %v\n%s", err, out)
		}
	})
}

// metricsPage is a node's metrics page: each family's type, and its samples.
type metricsPage struct {
	types   map[string]string // family name → counter, gauge, histogram, …
	samples []sample
}

type sample struct {
	name   string
	labels string // inside the braces, as the page writes them
	value  float64
}

var (
	typeLine   = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
	// A selector of a wasmkeep metric in PromQL, and a label matcher in it.
	selector = regexp.MustCompile(`\b(wasmkeep_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

func parsePage(t *testing.T, text string) *metricsPage {
	t.Helper()
	p := &metricsPage{types: map[string]string{}}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		if m := typeLine.FindStringSubmatch(line); m != nil {
			p.types[m[1]] = m[2]
		} else if m := sampleLine.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Fatalf("metrics page: %q: %v", line, err)
			}
			p.samples = append(p.samples, sample{m[1], m[2], v})
		}
	}
	if len(p.types) == 0 {
		t.Fatalf("no metric on the page:\n%s", text)
	}
	return p
}

// family is the family a series name belongs to: a histogram's _bucket,
// _count and _sum series are its own.
func (p *metricsPage) family(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && p.types[base] == "histogram" {
			return base
		}
	}
	return name
}

// queries says what expr asks for that the page does not have: a metric, or
// a label of it (job and instance are Prometheus's).
func (p *metricsPage) queries(expr string) error {
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if _, ok := p.types[p.family(name)]; !ok {
			return fmt.Errorf("no metric %s on the page", name)
		}
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			if l[1] == "job" || l[1] == "instance" || slices.ContainsFunc(p.samples, func(s sample) bool {
				return s.name == name && slices.ContainsFunc(labelPair.FindAllStringSubmatch(s.labels, -1), func(pair []string) bool { return pair[1] == l[1] })
			}) {
				continue
			}
			return fmt.Errorf("no series of %s with a label %s on the page", name, l[1])
		}
	}
	return nil
}

// rule is an alert rule of alerts.yaml.
type rule struct {
	alert, expr string
	annotations map[string]any
	labels      map[string]any
}

func readRules(t *testing.T, path string) []rule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yaml.Parser().Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var rules []rule
	groups, _ := doc["groups"].([]any)
	for _, g := range groups {
		list, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range list {
			m := r.(map[string]any)
			annotations, _ := m["annotations"].(map[string]any)
			labels, _ := m["labels"].(map[string]any)
			rules = append(rules, rule{fmt.Sprint(m["alert"]), fmt.Sprint(m["expr"]), annotations, labels})
		}
	}
	return rules
}

// ruleTests is a promtool test file over the page's series, as Prometheus
// would scrape them (job wasmkeep, instance b), for 20 minutes: first
// constant (no rule fires), then with every counter rising by one a minute,
// which fires the rules on lease failures, fences and failovers, the failed
// events of each class that has failed ones, and the bucket's errors if the
// page has such a series; not the rules on latency, readiness or scrapes.
func (p *metricsPage) ruleTests(t *testing.T, rulesPath string, rules []rule) map[string]any {
	const instance = "b"
	series := func(rising bool) []map[string]string {
		in := []map[string]string{{"series": `up{job="wasmkeep",instance="` + instance + `"}`, "values": "1+0x20"}}
		for _, s := range p.samples {
			step := "0"
			if kind := p.types[p.family(s.name)]; rising && (kind == "counter" || kind == "histogram") {
				step = "1"
			}
			labels := `job="wasmkeep",instance="` + instance + `"`
			if s.labels != "" {
				labels += "," + s.labels
			}
			in = append(in, map[string]string{"series": s.name + "{" + labels + "}", "values": strconv.FormatFloat(s.value, 'f', -1, 64) + "+" + step + "x20"})
		}
		return in
	}
	fires := map[string][]map[string]string{ // alert → the extra labels of each alert expected
		"WasmKeepNodeLeaseWriteFailed": {{}},
		"WasmKeepNodeFenced":           {{}},
		"WasmKeepFailover":             {{}},
	}
	for _, s := range p.samples {
		if s.name == "wasmkeep_events_total" && strings.Contains(s.labels, `outcome="failed"`) {
			class := regexp.MustCompile(`class="([^"]*)"`).FindStringSubmatch(s.labels)[1]
			if !slices.ContainsFunc(fires["WasmKeepEventsFailing"], func(l map[string]string) bool { return l["class"] == class }) {
				fires["WasmKeepEventsFailing"] = append(fires["WasmKeepEventsFailing"], map[string]string{"class": class})
			}
		}
		if s.name == "wasmkeep_bucket_requests_total" && strings.Contains(s.labels, `status="error"`) {
			fires["WasmKeepBucketErrors"] = []map[string]string{{}}
		}
	}
	if len(fires["WasmKeepEventsFailing"]) == 0 {
		t.Fatal("the page has no failed event")
	}
	checks := func(rising bool) []map[string]any {
		var out []map[string]any
		for _, r := range rules {
			alerts := []map[string]any{}
			if rising {
				for _, extra := range fires[r.alert] {
					labels := map[string]string{"job": "wasmkeep", "instance": instance}
					for k, v := range r.labels {
						labels[k] = fmt.Sprint(v)
					}
					for k, v := range extra {
						labels[k] = v
					}
					alerts = append(alerts, map[string]any{"exp_labels": labels, "exp_annotations": r.annotations})
				}
			}
			out = append(out, map[string]any{"eval_time": "20m", "alertname": r.alert, "exp_alerts": alerts})
		}
		return out
	}
	return map[string]any{
		"rule_files":          []string{rulesPath},
		"evaluation_interval": "1m",
		"tests": []map[string]any{
			{"interval": "1m", "input_series": series(false), "alert_rule_test": checks(false)},
			{"interval": "1m", "input_series": series(true), "alert_rule_test": checks(true)},
		},
	}
}
