package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/safepath"
)

// notReusableName is the file beside the workspace dir (in galley's folder
// of workspaces, which no agent may write) that keeps it out of reuse.
func notReusableName(dir string) string { return "." + filepath.Base(dir) + ".not-reusable" }

// NotReusableMark is the path of MarkNotReusable's mark for the workspace
// at dir, for a runtime that removes workspaces itself.
func NotReusableMark(dir string) string {
	return filepath.Join(filepath.Dir(dir), notReusableName(dir))
}

// MarkNotReusable keeps the workspace at dir out of reuse, saying why (a
// process of its agent that could not be ended may still change it):
// Prepare refuses it (Conflict) until Remove deletes it with the mark.
func MarkNotReusable(dir, reason string) error {
	dir, err := cleanDir(dir)
	if err != nil {
		return err
	}
	parent, err := safepath.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.WriteFile(notReusableName(dir), []byte(strings.TrimSpace(reason)+"\n"), 0o644)
}

// notReusable answers why dir is kept out of reuse, if it is.
func notReusable(dir string) (string, bool) {
	parent, err := safepath.Open(filepath.Dir(dir))
	if err != nil {
		return "", false
	}
	defer parent.Close()
	b, err := parent.ReadFile(notReusableName(dir), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		return "cannot read why: " + err.Error(), true
	}
	return strings.TrimSpace(string(b)), true
}

// refuseNotReusable is Prepare's answer for a workspace kept out of reuse.
func refuseNotReusable(dir string) error {
	if why, ok := notReusable(dir); ok {
		return galleyerr.E(galleyerr.Conflict, fmt.Sprintf("%s is kept out of reuse (%s); release it", dir, why))
	}
	return nil
}
