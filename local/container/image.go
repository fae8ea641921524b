package container

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path"
	"slices"
	"strings"
)

// BuildFromBinary commits the image ref holding only the program bin, at
// the image path at, as its entrypoint, with env as its environment. It
// uses buildah from scratch: for test images of a static binary, built in
// well under a second.
func BuildFromBinary(ctx context.Context, ref, bin, at string, env map[string]string) error {
	if _, err := exec.LookPath("buildah"); err != nil {
		return fmt.Errorf("%w: buildah not found (Debian: apt-get install buildah)", ErrNoRuntime)
	}
	out, err := exec.CommandContext(ctx, "buildah", "from", "scratch").Output()
	if err != nil {
		return fmt.Errorf("buildah from scratch: %v", err)
	}
	c := strings.TrimSpace(string(out))
	defer exec.Command("buildah", "rm", c).Run()
	steps := [][]string{
		{"copy", "--chmod", "0755", c, bin, at},
		{"config", "--entrypoint", jsonArray([]string{at}), "--workingdir", "/", c},
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		steps = append(steps, []string{"config", "--env", k + "=" + env[k], c})
	}
	steps = append(steps, []string{"commit", "--quiet", c, ref})
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, "buildah", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("buildah %s %s: %v: %s", s[0], path.Base(bin), err, lastLine(out))
		}
	}
	return nil
}

// ImageEnv returns the value of the variable name in the environment of
// the image ref's configuration ("" if it sets none).
func (r *Runtime) ImageEnv(ctx context.Context, ref, name string) (string, error) {
	out, err := r.podmanCmd(ctx, "image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", ref).Output()
	if err != nil {
		return "", fmt.Errorf("container: podman image inspect %s: %v", ref, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, name+"="); ok {
			return v, nil
		}
	}
	return "", nil
}
