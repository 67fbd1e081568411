package command

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

// readEnv reads each class's env files once, at start: those of its --env
// CLASS=FILE flags, else those node.env gives it. A class's files are read
// in order, a later one overriding an earlier one by name. Values are never
// logged; a file others can read is accepted with a warning naming it.
//
// A file for a class not served is an error (a typo would leave the class
// without its values), unless the classes are a deployed version's
// (deployed): a later deploy may add the class or have removed it, and a
// node that cannot start for it would take the app down node by node at
// its next restart. Such a file is then read, kept and logged.
func readEnv(flags []string, file map[string][]string, classes map[string]string, deployed bool, log *slog.Logger) (map[string]map[string]string, error) {
	files := map[string][]string{}
	source := map[string]string{} // class to where its files were given
	for _, s := range flags {
		class, path, ok := strings.Cut(s, "=")
		if !ok || class == "" || path == "" {
			return nil, fmt.Errorf("--env %q: want CLASS=FILE", s)
		}
		files[class] = append(files[class], path)
		source[class] = "--env"
	}
	for class, paths := range file {
		if _, flagged := files[class]; !flagged {
			files[class], source[class] = paths, "node.env"
		}
	}
	env := map[string]map[string]string{}
	for _, class := range slices.Sorted(maps.Keys(files)) {
		if _, ok := classes[class]; !ok && deployed {
			log.Warn("env files for a class the deployed version does not have: kept for a version that has it", "class", class, "from", source[class])
		} else if !ok {
			return nil, fmt.Errorf("%s for class %q, which is not served (served: %s)",
				source[class], class, strings.Join(slices.Sorted(maps.Keys(classes)), ", "))
		}
		env[class] = map[string]string{}
		for _, path := range files[class] {
			vars, worldReadable, err := envfile.Parse(path)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", source[class], class, err)
			}
			if worldReadable {
				log.Warn("env file is readable by every user of the machine: chmod 600 it", "class", class, "file", path)
			}
			maps.Copy(env[class], vars)
		}
	}
	return env, nil
}
