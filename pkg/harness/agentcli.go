package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FindProgram finds the program name the way an agent's driver runs it:
// in binDir first (the operator's --agent-bin-dir), then on PATH. It
// answers an absolute path, links not resolved.
func FindProgram(binDir, name string) (string, error) {
	if binDir != "" {
		p := filepath.Join(binDir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return filepath.Abs(p)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		where := "on PATH"
		if binDir != "" {
			where = "in " + binDir + " or on PATH"
		}
		return "", fmt.Errorf("no executable %q %s", name, where)
	}
	return filepath.Abs(p)
}

// programDirs are the folders an agent needs to read and execute to run
// the program at path: where its links lead (npm puts a package's command
// in node_modules/.bin as a link into the package, and the native
// installers link ~/.local/bin into a folder of versions) and, for a
// program inside a node_modules folder, that whole folder (a CLI loads its
// own package's files and its dependencies', a native one from a sibling
// package).
func programDirs(path string) []string {
	var dirs []string
	add := func(p string) {
		if nm := nodeModulesOf(p); nm != "" {
			dirs = append(dirs, nm)
		} else {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	add(path)
	for i, p := 0, path; i < 40; i++ {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		target, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
		add(p)
	}
	return dirs
}

// nodeModulesOf is the outermost node_modules folder holding p, or "".
func nodeModulesOf(p string) string {
	parts := strings.Split(filepath.Clean(p), string(filepath.Separator))
	for i, part := range parts {
		if part == "node_modules" && i > 0 {
			return string(filepath.Separator) + filepath.Join(parts[1:i+1]...)
		}
	}
	return ""
}

// runnableByOthers reports why a user other than this process's owner
// could not run the program at path (every folder it and its links lead
// through open to search, and with traversal every folder above them too;
// the files open to reading and execution), or nil. Without traversal the
// folders above are the agent's view's own (agentView).
func runnableByOthers(path string, traversal bool) error {
	for _, d := range programDirs(path) {
		if traversal && !traversableByOthers(d) {
			return fmt.Errorf("%s, or a folder above it, is closed to other users (chmod o+rx it, or install the CLI where every user may run it)", d)
		}
		if fi, err := os.Stat(d); !traversal && (err != nil || fi.Mode().Perm()&0o001 == 0) {
			return fmt.Errorf("%s is closed to other users (chmod o+rx it, or install the CLI where every user may run it)", d)
		}
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return errors.New(real + " may not be read and run by other users (chmod o+rx it)")
	}
	return nil
}
