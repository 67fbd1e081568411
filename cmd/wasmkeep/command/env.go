package command

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// readEnv reads the --env CLASS=FILE files once, at start: a class's files
// in order, a later one overriding an earlier one by name. Values are never
// logged; a file others can read is accepted with a warning naming it.
func readEnv(specs []string, classes map[string]string, log *slog.Logger) (map[string]map[string]string, error) {
	env := map[string]map[string]string{}
	for _, s := range specs {
		class, file, ok := strings.Cut(s, "=")
		if !ok || class == "" || file == "" {
			return nil, fmt.Errorf("--env %q: want CLASS=FILE", s)
		}
		if _, ok := classes[class]; !ok { // a typo would leave the class without its values
			return nil, fmt.Errorf("--env for class %q, which is not served (served: %s)",
				class, strings.Join(slices.Sorted(maps.Keys(classes)), ", "))
		}
		vars, worldReadable, err := node.ParseEnvFile(file)
		if err != nil {
			return nil, fmt.Errorf("--env %s: %w", class, err)
		}
		if worldReadable {
			log.Warn("--env file is readable by every user of the machine: chmod 600 it", "class", class, "file", file)
		}
		if env[class] == nil {
			env[class] = map[string]string{}
		}
		maps.Copy(env[class], vars)
	}
	return env, nil
}
