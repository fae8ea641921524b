package awslocal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Binaries are the local programs the stack runs besides the template's
// function assets (which it runs from the template's folder).
type Binaries struct {
	RIE     string // aws-lambda-rie (tools/rie)
	ECS     string // ecs-standin: the ECS stand-in's task init (local/cmd/ecs-standin)
	Harness string // galley-worker: the worker image's entrypoint (cmd/galley-worker)
	// Agents is the folder of the stand-in claude and codex CLIs, which
	// the local worker image has on its PATH where the real image has the
	// real CLIs (local/standin-cli).
	Agents string
}

// BinariesIn is the layout make uses: everything in dir (bin/), the
// stand-in CLIs in dir/standin-agents.
func BinariesIn(dir string) Binaries {
	return Binaries{
		RIE: filepath.Join(dir, "aws-lambda-rie"), ECS: filepath.Join(dir, "ecs-standin"),
		Harness: filepath.Join(dir, "galley-worker"), Agents: filepath.Join(dir, "standin-agents"),
	}
}

// Check reports every missing binary.
func (b Binaries) Check() error {
	var missing []string
	for _, p := range []string{b.RIE, b.ECS, b.Harness, filepath.Join(b.Agents, "claude"), filepath.Join(b.Agents, "codex")} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: build them with `make build-aws-local`", strings.Join(missing, ", "))
	}
	return nil
}
