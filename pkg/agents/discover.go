package agents

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// FindCLI finds the family's CLI: in binDir when it is set (the operator's
// GALLEY_AGENT_BIN_DIR, put first on the agent's PATH), else on PATH. The
// CLI's name is the family's: claude, codex.
func FindCLI(binDir, family string) (string, error) {
	op := galleyerr.Op("agents.find")
	if family != FamilyClaude && family != FamilyCodex {
		return "", galleyerr.E(op, galleyerr.Unsupported, fmt.Sprintf("no CLI driver for agent family %q", family))
	}
	if binDir != "" {
		p := filepath.Join(binDir, family)
		if isExecutable(p) {
			return filepath.Abs(p)
		}
	}
	p, err := exec.LookPath(family)
	if err == nil {
		return filepath.Abs(p)
	}
	where := "on PATH"
	if binDir != "" {
		where = "in " + binDir + " or on PATH"
	}
	return "", galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("the %s CLI is not installed here: no executable %q %s", family, family, where))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Discover reports what a deployment whose workers find their CLIs in
// binDir (or, when binDir is empty, on PATH) can declare in its
// descriptor's workerSelection: the families whose CLI is there, whether a
// launch can choose a model (yes, when any family is), and the effort
// support the drivers honour ("always" when any family is, else
// "unsupported").
func Discover(binDir string) (families []string, model bool, effort string) {
	for _, f := range Families() {
		if _, err := FindCLI(binDir, f); err == nil {
			families = append(families, f)
		}
	}
	if len(families) == 0 {
		return nil, false, "unsupported"
	}
	return families, true, EffortSupport
}
