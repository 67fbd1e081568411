package config

import (
	"strings"
	"testing"
	"time"
)

// Node.Check names the key, its flag, the value and what is valid; zero
// values (the node's defaults) pass.
func TestNodeCheck(t *testing.T) {
	if err := (Node{}).Check(); err != nil {
		t.Errorf("zero settings: %v", err)
	}
	rate := -1
	for want, n := range map[string]Node{
		"node.max_body_bytes (--max-body-bytes) is -1: it cannot be negative":                  {MaxBodyBytes: -1},
		"node.websocket_pong_wait (--websocket-pong-wait) is -1s: it cannot be negative":       {WebSocketPongWait: -time.Second},
		"node.guest_log_rate (--guest-log-rate) is -1: it cannot be negative":                  {GuestLogRate: &rate},
		"node.memory_limit_mib (--memory-limit-mib) is 4096: it can be at most 4095":           {MemoryLimitMiB: 4096},
		`node.log_format (--log-format) is "yaml": want text, json`:                            {LogFormat: "yaml"},
		`node.log_level (--log-level) is "trace": want debug, info, warn, error`:               {LogLevel: "trace"},
		"node.fetch_step_timeout (--fetch-step-timeout) is 2m0s: it can be at most node.fetch": {FetchStepTimeout: 2 * time.Minute, FetchMaxStepTimeout: time.Minute},
	} {
		if err := n.Check(); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", n, err, want)
		}
	}
}
