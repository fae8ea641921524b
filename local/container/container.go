// Package container runs OCI containers on one machine through podman with
// the runc runtime, the way a Fargate task runs its container: entry point
// and command, user, working folder, environment, a capability set derived
// from Docker's defaults, an init process, a stop timeout (SIGTERM, then
// SIGKILL), cpu and memory limits, bind mounts, a read-only root file
// system, a network and host names. The ECS stand-in (local/ecsstandin)
// builds a Spec from a task definition; this package knows nothing of ECS.
//
// Environment values never reach a command line: they travel in a file of
// mode 600 in a private folder that is removed once podman has created the
// container (values holding a newline, which that file cannot carry, in
// podman's own environment instead), and the package logs names only.
// podman keeps the container's configuration, environment included, in its
// root-only storage until the container is removed.
//
// runc is used, not crun: crun refuses the cgroup v1 layout of the
// machines this runs on. Resource limits (ulimits) are set explicitly and
// clamped to this process's own hard limits, since a sandbox without
// CAP_SYS_RESOURCE cannot raise them: runc would fail "error setting
// rlimit". Fargate's default open-file limit is 65535; here it is at most
// the host's hard limit (docs/aws-local.md).
package container

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FargateNofile is Fargate's default open-file limit (soft and hard).
const FargateNofile = 65535

// defaultNproc bounds processes per uid when the host sets no lower hard
// limit.
const defaultNproc = 4096

// Runtime starts containers. Create it with New.
type Runtime struct {
	podman, oci string
	dir         string // private folder for environment files
	conf        string // the containers.conf podman reads
	log         *slog.Logger
	nofile      uint64
	nproc       uint64
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithPodman sets the podman binary (default: "podman" on PATH).
func WithPodman(path string) Option { return func(r *Runtime) { r.podman = path } }

// WithOCIRuntime sets the OCI runtime podman uses (default "runc").
func WithOCIRuntime(name string) Option { return func(r *Runtime) { r.oci = name } }

// WithDir sets the private folder for the environment files (default: a
// fresh folder under the system's temporary folder).
func WithDir(dir string) Option { return func(r *Runtime) { r.dir = dir } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runtime) { r.log = l } }

// ErrNoRuntime is returned by New when podman or the OCI runtime is not
// installed.
var ErrNoRuntime = errors.New("no container runtime")

// New returns a Runtime after checking that podman and the OCI runtime are
// installed and that podman answers.
func New(opts ...Option) (*Runtime, error) {
	r := &Runtime{podman: "podman", oci: "runc", log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(r)
	}
	p, err := exec.LookPath(r.podman)
	if err != nil {
		return nil, fmt.Errorf("%w: podman not found (%v); install podman and runc (Debian: apt-get install podman runc; scripts/worker-image.sh does)", ErrNoRuntime, err)
	}
	r.podman = p
	if _, err := exec.LookPath(r.oci); err != nil {
		return nil, fmt.Errorf("%w: OCI runtime %s not found (%v); install it (Debian: apt-get install runc)", ErrNoRuntime, r.oci, err)
	}
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "galley-container-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(r.dir, 0o700); err != nil {
		return nil, err
	}
	// podman's own default set lacks three of Docker's; and podman makes
	// every --cap-add effective for a non-root user, where Docker (and
	// Fargate) only bound it. So Docker's set is podman's default here, and
	// a Spec's set is reached by dropping.
	var conf strings.Builder
	conf.WriteString("[containers]\ndefault_capabilities = [\n")
	for _, c := range dockerDefaults {
		fmt.Fprintf(&conf, "  %q,\n", c)
	}
	conf.WriteString("]\n")
	r.conf = filepath.Join(r.dir, "containers.conf")
	if err := os.WriteFile(r.conf, []byte(conf.String()), 0o600); err != nil {
		return nil, err
	}
	r.nofile, r.nproc = FargateNofile, defaultNproc
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Max < r.nofile {
		r.nofile = rl.Max
	}
	if syscall.Getrlimit(6 /* RLIMIT_NPROC */, &rl) == nil && rl.Max < r.nproc {
		r.nproc = rl.Max
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := r.podmanCmd(ctx, "version", "--format", "{{.Client.Version}}").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: podman does not answer: %v: %s", ErrNoRuntime, err, bytes.TrimSpace(out))
	}
	return r, nil
}

// Nofile is the open-file limit containers get: Fargate's, or the host's
// hard limit if that is lower.
func (r *Runtime) Nofile() uint64 { return r.nofile }

func (r *Runtime) podmanCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.podman, append([]string{"--runtime", r.oci}, args...)...)
	cmd.Env = append(podmanEnv(), "CONTAINERS_CONF="+r.conf)
	return cmd
}

// podmanEnv is what podman itself runs with: the host's PATH (for conmon,
// netavark, runc) and nothing a container could be given by mistake.
func podmanEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, k := range []string{"HOME", "TMPDIR", "XDG_RUNTIME_DIR", "CONTAINERS_STORAGE_CONF"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// ImageExists reports whether the image ref is in podman's local storage.
func (r *Runtime) ImageExists(ctx context.Context, ref string) bool {
	return r.podmanCmd(ctx, "image", "exists", ref).Run() == nil
}

// Mount is a bind mount of a host folder.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Spec is one container.
type Spec struct {
	// Name is the container's name (unique among podman's containers).
	Name  string
	Image string
	// Entrypoint replaces the image's when set, and with it the image's
	// command, as Docker does; Command replaces the image's command.
	Entrypoint, Command []string
	// User is "uid", "uid:gid" or a name the image knows; empty: the
	// image's.
	User string
	// WorkingDir replaces the image's when set.
	WorkingDir string
	// Env is added to the image's environment.
	Env map[string]string
	// Capabilities is the container's whole capability set (names without
	// CAP_; see Capabilities for ECS's add/drop rule). nil: Docker's
	// defaults.
	Capabilities []string
	// Init runs an init process as PID 1 that forwards signals and reaps
	// orphans (ECS's initProcessEnabled).
	Init bool
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	// CPUs and MemoryMiB limit the container when positive; memory is
	// without swap, as on Fargate.
	CPUs      float64
	MemoryMiB int
	Mounts    []Mount
	// ReadOnlyRoot mounts the image's root file system read-only.
	ReadOnlyRoot bool
	// Ulimits replace the runtime's limits of the same names (nofile and
	// nproc by default: Nofile). A hard limit above this process's own is
	// refused: the container could not be given it.
	Ulimits []Ulimit
	// Network is the podman network to join ("" is podman's default);
	// Hosts adds names to the container's /etc/hosts.
	Network string
	Hosts   map[string]string
	// Stdout and Stderr receive the container's output (nil: dropped).
	Stdout, Stderr io.Writer
}

// Ulimit is a resource limit (a name of setrlimit's, as podman's --ulimit
// takes it: nofile, nproc, core, ...).
type Ulimit struct {
	Name       string
	Soft, Hard uint64
}

// ulimitArgs are the --ulimit flags for spec: the runtime's nofile and
// nproc unless spec sets them, then spec's.
func (r *Runtime) ulimitArgs(spec Spec) ([]string, error) {
	limits := []Ulimit{{"nofile", r.nofile, r.nofile}, {"nproc", r.nproc, r.nproc}}
	res := map[string]int{"nofile": syscall.RLIMIT_NOFILE, "nproc": 6 /* RLIMIT_NPROC */}
	for _, u := range spec.Ulimits {
		if u.Soft > u.Hard {
			return nil, fmt.Errorf("container: ulimit %s: soft limit %d above hard limit %d", u.Name, u.Soft, u.Hard)
		}
		if n, ok := res[u.Name]; ok {
			var rl syscall.Rlimit
			if err := syscall.Getrlimit(n, &rl); err == nil && u.Hard > rl.Max {
				return nil, fmt.Errorf("container: ulimit %s hard limit %d is above this process's hard limit %d, which a container here cannot exceed", u.Name, u.Hard, rl.Max)
			}
		}
		limits = slices.DeleteFunc(limits, func(l Ulimit) bool { return l.Name == u.Name })
		limits = append(limits, u)
	}
	var args []string
	for _, l := range limits {
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", l.Name, l.Soft, l.Hard))
	}
	return args, nil
}

// Container is a created and started container.
type Container struct {
	r    *Runtime
	id   string
	name string
	stop time.Duration
	done chan struct{}
	code int
	err  error

	removeOnce sync.Once
}

// Start creates and starts the container of spec, and returns once its
// process runs. The caller waits for it (Wait) and removes it (Remove).
func (r *Runtime) Start(ctx context.Context, spec Spec) (*Container, error) {
	if spec.Image == "" || spec.Name == "" {
		return nil, errors.New("container: a name and an image are required")
	}
	args, envFile, podEnv, err := r.createArgs(spec)
	if envFile != "" {
		defer os.Remove(envFile)
	}
	if err != nil {
		return nil, err
	}
	cmd := r.podmanCmd(ctx, args...)
	cmd.Env = append(cmd.Env, podEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("container %s: podman create: %v: %s", spec.Name, err, lastLine(stderr.Bytes()))
	}
	id := strings.TrimSpace(string(out))
	_ = os.Remove(envFile) // podman holds the values now
	c := &Container{r: r, id: id, name: spec.Name, stop: spec.StopTimeout, done: make(chan struct{})}
	r.log.Info("container created", "name", spec.Name, "id", shortID(id), "image", spec.Image, "env", slices.Sorted(maps.Keys(spec.Env)))
	if out, err := r.podmanCmd(ctx, "start", id).CombinedOutput(); err != nil {
		_ = c.Remove(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("container %s: podman start: %v: %s", spec.Name, err, lastLine(out))
	}
	// The log is read from the start, whenever this attaches.
	logs := r.podmanCmd(context.WithoutCancel(ctx), "logs", "--follow", id)
	logs.Stdout, logs.Stderr = orDiscard(spec.Stdout), orDiscard(spec.Stderr)
	logsErr := logs.Start()
	go func() {
		defer close(c.done)
		out, err := r.podmanCmd(context.Background(), "wait", id).Output()
		if err == nil {
			c.code, err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			c.err = fmt.Errorf("container %s: podman wait: %v", spec.Name, err)
		}
		if logsErr == nil {
			_ = logs.Wait()
		}
	}()
	return c, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func (r *Runtime) createArgs(spec Spec) (args []string, envFile string, podEnv []string, err error) {
	args = []string{"create", "--name", spec.Name,
		"--log-driver", "k8s-file",
		"--pull", "never",
		"--stop-signal", "SIGTERM",
		"--stop-timeout", strconv.Itoa(int((spec.StopTimeout + time.Second - 1) / time.Second)),
		// The image's own environment stays; the host's never comes in.
		"--env-host=false", "--http-proxy=false",
	}
	ul, err := r.ulimitArgs(spec)
	if err != nil {
		return nil, "", nil, err
	}
	args = append(args, ul...)
	caps := spec.Capabilities
	if caps == nil {
		caps = DockerDefaults()
	}
	for _, c := range dockerDefaults {
		if !slices.Contains(caps, c) {
			args = append(args, "--cap-drop", "CAP_"+c)
		}
	}
	for _, c := range caps {
		if !slices.Contains(dockerDefaults, c) {
			// Effective for a non-root user too, unlike Docker: podman's
			// rule (docs/aws-local.md).
			args = append(args, "--cap-add", "CAP_"+c)
		}
	}
	if spec.Init {
		args = append(args, "--init")
	}
	if spec.User != "" {
		args = append(args, "--user", spec.User)
	}
	if spec.WorkingDir != "" {
		args = append(args, "--workdir", spec.WorkingDir)
	}
	if spec.CPUs > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(spec.CPUs, 'f', -1, 64))
	}
	if spec.MemoryMiB > 0 {
		m := strconv.Itoa(spec.MemoryMiB) + "m"
		args = append(args, "--memory", m, "--memory-swap", m)
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) || strings.ContainsAny(m.Source+m.Target, ",:") {
			return nil, "", nil, fmt.Errorf("container %s: mount %s on %s: paths must be absolute, without ',' or ':'", spec.Name, m.Source, m.Target)
		}
		o := "type=bind,source=" + m.Source + ",target=" + m.Target
		if m.ReadOnly {
			o += ",readonly=true"
		}
		args = append(args, "--mount", o)
	}
	if spec.ReadOnlyRoot {
		// No writable /tmp or /run either, as on Fargate.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if spec.Network != "" {
		args = append(args, "--network", spec.Network)
	}
	for _, h := range slices.Sorted(maps.Keys(spec.Hosts)) {
		args = append(args, "--add-host", h+":"+spec.Hosts[h])
	}
	if len(spec.Env) > 0 {
		f, err := os.CreateTemp(r.dir, "env-")
		if err != nil {
			return nil, "", nil, err
		}
		envFile = f.Name()
		w := bufio.NewWriter(f)
		for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
			v := spec.Env[k]
			if k == "" || strings.ContainsAny(k, "=\n\x00") || strings.ContainsRune(v, 0) {
				f.Close()
				return nil, envFile, nil, fmt.Errorf("container %s: environment variable %q cannot be passed", spec.Name, k)
			}
			if strings.ContainsAny(v, "\r\n") {
				// The file cannot carry a line break: podman reads this one
				// from its own environment, which only root can read.
				if slices.Contains([]string{"PATH", "HOME", "TMPDIR"}, k) || strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "CONTAINERS_") {
					f.Close()
					return nil, envFile, nil, fmt.Errorf("container %s: variable %s holds a line break and is one podman reads itself", spec.Name, k)
				}
				podEnv = append(podEnv, k+"="+v)
				fmt.Fprintln(w, k)
				continue
			}
			fmt.Fprintf(w, "%s=%s\n", k, v)
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return nil, envFile, nil, err
		}
		if err := f.Close(); err != nil {
			return nil, envFile, nil, err
		}
		args = append(args, "--env-file", envFile)
	}
	if spec.Entrypoint != nil {
		// JSON form, so that an entrypoint of several words stays one argv.
		args = append(args, "--entrypoint", jsonArray(spec.Entrypoint))
	}
	args = append(args, "--", spec.Image)
	args = append(args, spec.Command...)
	return args, envFile, podEnv, nil
}

// StaticDir returns the host folder where podman keeps the container's
// configuration (config.json, its environment included).
func (c *Container) StaticDir(ctx context.Context) (string, error) {
	out, err := c.r.podmanCmd(ctx, "inspect", "--format", "{{.StaticDir}}", c.id).Output()
	if err != nil {
		return "", fmt.Errorf("container %s: podman inspect: %v", c.name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RootDir returns the host folder that is the running container's own
// file system (its image under its writable layer, overlay's merged
// folder), where what the container writes outside its mounts is: the
// task's own storage, as a test sees it from the host. It is gone once
// the container is removed.
func (c *Container) RootDir(ctx context.Context) (string, error) {
	out, err := c.r.podmanCmd(ctx, "inspect", "--format", "{{.GraphDriver.Data.MergedDir}}", c.id).Output()
	if err != nil {
		return "", fmt.Errorf("container %s: podman inspect: %v", c.name, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || dir == "<no value>" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("container %s: podman names no merged folder of its storage (%q): the overlay driver is needed", c.name, dir)
	}
	return dir, nil
}

// ID returns the container's podman ID.
func (c *Container) ID() string { return c.id }

// Done is closed once the container's process has exited.
func (c *Container) Done() <-chan struct{} { return c.done }

// Wait waits for the container's process to exit and returns its exit
// code: the status, or 128 plus the signal that ended it.
func (c *Container) Wait(ctx context.Context) (int, error) {
	select {
	case <-c.done:
		return c.code, c.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Stop sends SIGTERM to the container's first process and SIGKILL to
// every process in it after the spec's StopTimeout, and returns once the
// container has exited.
func (c *Container) Stop(ctx context.Context) error {
	t := strconv.Itoa(int((c.stop + time.Second - 1) / time.Second))
	out, err := c.r.podmanCmd(ctx, "stop", "--time", t, c.id).CombinedOutput()
	if err != nil {
		select {
		case <-c.done: // it had exited already
			return nil
		default:
		}
		return fmt.Errorf("container %s: podman stop: %v: %s", c.name, err, lastLine(out))
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove removes the container (killing it if it still runs) and its log.
func (c *Container) Remove(ctx context.Context) error {
	var err error
	c.removeOnce.Do(func() {
		out, e := c.r.podmanCmd(ctx, "rm", "--force", "--time", "0", c.id).CombinedOutput()
		if e != nil {
			err = fmt.Errorf("container %s: podman rm: %v: %s", c.name, e, lastLine(out))
		}
	})
	return err
}

// Exec runs argv inside the running container as root and returns its
// combined output; for tests and diagnostics.
func (c *Container) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	return c.r.podmanCmd(ctx, append([]string{"exec", c.id}, argv...)...).CombinedOutput()
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func jsonArray(xs []string) string {
	b, _ := json.Marshal(xs)
	return string(b)
}
