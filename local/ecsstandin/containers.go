package ecsstandin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/local/container"
	"github.com/galley-run/galley/pkg/runtime/localproc"
	"github.com/galley-run/galley/pkg/safepath"
	"github.com/galley-run/galley/pkg/service"
)

// Container mode: a task whose image maps to a container image
// (WithContainerImage) runs as a container of that image through package
// container, with its task definition applied as Fargate applies it;
// every other task runs as local processes (WithImage).

// ContainerNetwork is where task containers run: a podman network, the
// names added to each container's /etc/hosts (Fargate's VPC and its DNS),
// and the task endpoint's base URL as containers reach it (the stand-in
// listens where WithTaskEndpoint says).
type ContainerNetwork struct {
	Name         string
	Hosts        map[string]string
	TaskEndpoint string
}

// WithContainers runs the tasks whose image maps to a container image
// through rt, on network n.
func WithContainers(rt *container.Runtime, n ContainerNetwork) Option {
	return func(s *Server) { s.containers, s.ctrNet = rt, n }
}

// ContainerImage is the local container image an ECS image reference runs
// as, with what this machine adds to its containers: Env after everything
// else (the AWS endpoints of this machine, where on AWS the SDKs' defaults
// are right) and Mounts (read-only files such as the local CA).
type ContainerImage struct {
	Ref    string
	Env    map[string]string
	Mounts []container.Mount
	// Entrypoint, when set, replaces the image's where the definition
	// names none (a harness under development, mounted in).
	Entrypoint []string
}

// containerImage is a container image rule.
type containerImage struct {
	match func(ref string) bool
	ContainerImage
}

// WithContainerImage makes every image reference match accepts run as the
// container image img (with WithContainers). A rule given later wins.
func WithContainerImage(match func(ref string) bool, img ContainerImage) Option {
	img.Env, img.Mounts, img.Entrypoint = maps.Clone(img.Env), slices.Clone(img.Mounts), slices.Clone(img.Entrypoint)
	return func(s *Server) { s.ctrImages = append(s.ctrImages, containerImage{match: match, ContainerImage: img}) }
}

func (s *Server) containerImage(ref string) (containerImage, bool) {
	if s.containers == nil {
		return containerImage{}, false
	}
	for _, r := range slices.Backward(s.ctrImages) {
		if r.match(ref) {
			return r, true
		}
	}
	return containerImage{}, false
}

// AccessPoint is an EFS access point: the file system it opens, the
// folder that is the root of its mounts (made with CreationInfo when
// missing), and the POSIX user it imposes. That is not modelled (a bind
// mount cannot make every operation as one uid): a task mounting through
// an access point with a PosixUser fails to start, naming it
// (docs/runtime-ecs.md).
type AccessPoint struct {
	FileSystemID  string
	RootDirectory string
	CreationInfo  *CreationInfo
	PosixUser     *PosixUser
}

// CreationInfo is how EFS makes an access point's missing root folder.
type CreationInfo struct {
	OwnerUID, OwnerGID int
	Permissions        os.FileMode
}

// PosixUser is an access point's user.
type PosixUser struct {
	UID, GID int
}

// WithAccessPoint makes the access point id exist. A mount through it
// shows its root folder below the file system's folder (WithFileSystem).
func WithAccessPoint(id string, ap AccessPoint) Option {
	return func(s *Server) {
		if s.accessPoints == nil {
			s.accessPoints = map[string]AccessPoint{}
		}
		s.accessPoints[id] = ap
	}
}

// mountRoot returns the host folder an EFS volume's mount shows, and
// whether it is known: the file system's folder, below it the access
// point's root or the volume's rootDirectory.
func (s *Server) mountRoot(efs *EFSVolume) (string, *AccessPoint, bool) {
	dir := s.fileSystems[efs.FileSystemID]
	if dir == "" {
		return "", nil, false
	}
	if efs.AuthorizationConfig != nil && efs.AuthorizationConfig.AccessPointID != "" {
		ap, ok := s.accessPoints[efs.AuthorizationConfig.AccessPointID]
		if !ok || ap.FileSystemID != efs.FileSystemID {
			return "", nil, false
		}
		return filepath.Join(dir, filepath.Clean("/"+ap.RootDirectory)), &ap, true
	}
	return filepath.Join(dir, filepath.Clean("/"+efs.RootDirectory)), nil, true
}

// ensureRoot makes an access point's root folder dir, beneath the file
// system's folder fsRoot, as EFS does when a mount finds it missing: with
// the creation info's owner and mode, or the mount fails. It works as root
// on a file system agents write to, so it follows no link (pkg/safepath).
func ensureRoot(fsRoot, dir string, ap *AccessPoint) string {
	const failed = "ResourceInitializationError: "
	root, err := safepath.Open(fsRoot)
	if err != nil {
		return failed + err.Error()
	}
	defer root.Close()
	rel, err := filepath.Rel(fsRoot, dir)
	if err != nil {
		return failed + err.Error()
	}
	if _, err := root.Lstat(rel); err == nil || ap == nil {
		if err != nil {
			return failed + "failed to invoke EFS utils commands to set up EFS volumes: mount.nfs4: access denied by server while mounting " + dir
		}
		return ""
	}
	if ap.CreationInfo == nil {
		return failed + "failed to invoke EFS utils commands to set up EFS volumes: the access point's root directory does not exist and the access point has no creation info"
	}
	ci := ap.CreationInfo
	if parent := filepath.Dir(rel); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return failed + err.Error()
		}
	}
	if err := root.Mkdir(rel, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return failed + err.Error()
	}
	if err := root.Lchown(rel, ci.OwnerUID, ci.OwnerGID); err != nil {
		return failed + err.Error()
	}
	if err := root.Chmod(rel, ci.Permissions); err != nil {
		return failed + err.Error()
	}
	return ""
}

// taskProcs runs tasks: localproc for processes, and the containers of
// container-mode tasks, answering for both by task id.
type taskProcs struct {
	*localproc.Runtime

	mu   sync.Mutex
	ctrs map[string]*taskContainer
	wg   sync.WaitGroup
}

// taskContainer is a task's container; recorded is closed once its exit
// code is written, after which the watcher may read it.
type taskContainer struct {
	c        *container.Container
	recorded chan struct{}
}

// ContainerConfig returns the host file where podman keeps a running
// container-mode task's configuration, its environment included (root's
// alone): for tests that aim an attack at it.
func (s *Server) ContainerConfig(taskID string) (string, error) {
	tc := s.procs.container(taskID)
	if tc == nil {
		return "", fmt.Errorf("ecsstandin: task %s has no container", taskID)
	}
	dir, err := tc.c.StaticDir(context.Background())
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "config.json"), nil
}

func newTaskProcs(lp *localproc.Runtime) *taskProcs {
	return &taskProcs{Runtime: lp, ctrs: map[string]*taskContainer{}}
}

func (p *taskProcs) container(id string) *taskContainer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctrs[id]
}

// Liveness answers for a container as localproc does for a process.
func (p *taskProcs) Liveness(ctx context.Context, id string) (service.Liveness, error) {
	c := p.container(id)
	if c == nil {
		return p.Runtime.Liveness(ctx, id)
	}
	select {
	case <-c.recorded:
		return service.LivenessExited, nil
	default:
		return service.LivenessLive, nil
	}
}

// Stop stops a container as localproc stops a process: it returns at
// once; SIGKILL follows the stop timeout.
func (p *taskProcs) Stop(ctx context.Context, id string) error {
	c := p.container(id)
	if c == nil {
		return p.Runtime.Stop(ctx, id)
	}
	p.wg.Go(func() { _ = c.c.Stop(context.Background()) })
	return nil
}

// Close waits for the pending stops and then localproc's.
func (p *taskProcs) Close() error {
	p.wg.Wait()
	return p.Runtime.Close()
}

// startContainer creates and starts t's container from its definition,
// with env its whole environment (the image's own comes from the image),
// and records its start and exit where the watcher looks for them. It
// answers the host folder of the container's own file system (the task's
// own storage, which goes with the container), "" when podman names none.
func (s *Server) startContainer(t *task, ci containerImage, env map[string]string) (string, error) {
	c := t.def.ContainerDefinitions[0]
	spec := container.Spec{
		Name:       "galley-ecs-" + t.id,
		Image:      ci.Ref,
		Entrypoint: nil,
		User:       c.User,
		WorkingDir: c.WorkingDirectory,
		Env:        maps.Clone(env),
		Network:    s.ctrNet.Name,
		Hosts:      s.ctrNet.Hosts,
		CPUs:       float64(t.def.cpu) / 1024,
		MemoryMiB:  t.def.memory,
	}
	maps.Copy(spec.Env, ci.Env)
	spec.Mounts = slices.Clone(ci.Mounts)
	if len(c.EntryPoint) > 0 {
		spec.Entrypoint = c.EntryPoint
	} else if len(ci.Entrypoint) > 0 {
		spec.Entrypoint = ci.Entrypoint
	}
	spec.Command = c.Command
	if t.overrideCmd != nil {
		spec.Command = t.overrideCmd
	}
	spec.StopTimeout = s.grace
	if c.StopTimeout != nil {
		spec.StopTimeout = time.Duration(*c.StopTimeout) * time.Second
	}
	var add, drop []string
	if lp := c.LinuxParameters; lp != nil {
		spec.Init = lp.InitProcessEnabled != nil && *lp.InitProcessEnabled
		if lp.Capabilities != nil {
			add, drop = lp.Capabilities.Add, lp.Capabilities.Drop
		}
	}
	caps, err := container.Capabilities(add, drop)
	if err != nil {
		return "", err
	}
	spec.Capabilities = caps
	spec.ReadOnlyRoot = c.ReadonlyRootFilesystem != nil && *c.ReadonlyRootFilesystem
	for _, u := range c.Ulimits {
		if u.SoftLimit < 0 || u.HardLimit < 0 {
			return "", fmt.Errorf("ulimit %s: negative limit", u.Name)
		}
		spec.Ulimits = append(spec.Ulimits, container.Ulimit{Name: u.Name, Soft: uint64(u.SoftLimit), Hard: uint64(u.HardLimit)})
	}
	vols := map[string]Volume{}
	for _, v := range t.def.Volumes {
		vols[v.Name] = v
	}
	for _, mp := range c.MountPoints {
		efs := vols[mp.SourceVolume].EFSVolumeConfiguration
		if efs == nil {
			continue // the task's own storage: the container's layer
		}
		dir, _, _ := s.mountRoot(efs)
		spec.Mounts = append(spec.Mounts, container.Mount{Source: dir, Target: filepath.Clean(mp.ContainerPath), ReadOnly: mp.ReadOnly})
	}
	if err := os.MkdirAll(t.root, 0o700); err != nil {
		return "", err
	}
	logFile, err := os.OpenFile(filepath.Join(t.root, "container.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	spec.Stdout, spec.Stderr = logFile, logFile
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctr, err := s.containers.Start(ctx, spec)
	if err != nil {
		logFile.Close()
		return "", err
	}
	tc := &taskContainer{c: ctr, recorded: make(chan struct{})}
	s.procs.mu.Lock()
	s.procs.ctrs[t.id] = tc
	s.procs.mu.Unlock()
	if err := writeFile(t.readyFile, nil); err != nil {
		s.log.Error("cannot record a container's start", "task", t.arn, "err", err)
	}
	// Read before the watcher below may remove the container.
	root, err := ctr.RootDir(ctx)
	if err != nil {
		s.log.Warn("the host cannot see a task's own storage", "task", t.arn, "err", err)
	}
	s.procs.wg.Go(func() {
		defer logFile.Close()
		defer close(tc.recorded)
		code, err := ctr.Wait(context.Background())
		if err != nil {
			s.log.Error("cannot wait for a task's container", "task", t.arn, "err", err)
		} else if err := writeFile(t.exitFile, fmt.Appendf(nil, "%d\n", code)); err != nil {
			s.log.Error("cannot record a container's exit", "task", t.arn, "err", err)
		}
		if err := ctr.Remove(context.Background()); err != nil {
			s.log.Error("cannot remove a task's container", "task", t.arn, "err", err)
		}
	})
	return root, nil
}

// ContainerLog returns what a container-mode task's container wrote so
// far (for tests and operators: it may hold anything the task printed).
func (s *Server) ContainerLog(taskID string) ([]byte, error) {
	if strings.ContainsAny(taskID, "/.") {
		return nil, fmt.Errorf("ecsstandin: bad task id")
	}
	return os.ReadFile(filepath.Join(s.procs.WorkspacesDir(), taskID, "container.log"))
}
