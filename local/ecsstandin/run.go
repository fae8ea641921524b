package ecsstandin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/pkg/service"
)

// secretsTimeout bounds the reading of a task's secrets.
const secretsTimeout = 30 * time.Second

// task is one task. Every field is guarded by Server.mu.
type task struct {
	id, arn, clusterArn, taskDefArn, family string
	revision                                string
	def                                     *taskDef
	container, image                        string // the definition's container
	taskRole, execRole                      string // the definition's, or the overrides'
	credID, metaID                          string // the task endpoint's paths
	startedBy, group, clientToken           string
	launchType, capacityProvider            string
	platformVersion                         string
	overrides                               taskOverride
	tags                                    []tag
	overrideCmd                             []string   // the override's command; nil: none
	overrideEnv                             []KeyValue // the override's environment
	env                                     map[string]string
	args                                    []string // the container's process

	lastStatus, desiredStatus string
	stopCode, stoppedReason   string
	version                   int64
	createdAt, pullStartedAt  time.Time
	pullStoppedAt, startedAt  time.Time
	stoppingAt, stoppedAt     time.Time
	updatedAt, visibleAt      time.Time

	containerArn, containerStatus, containerReason, runtimeID string
	exitCode                                                  *int

	root      string // the task's storage on the host (a container's log)
	ctrRoot   string // a container's own file system on the host, once it runs
	workspace string // GALLEY_WORKSPACE on the host, if set (and known)
	exitFile  string
	readyFile string
	launched  bool // its init was started
	ctr       bool // it runs as a container (containers.go)
	stopAsked bool // localproc was asked to stop it
}

// TaskInfo is a snapshot of one task, for tests and operators.
type TaskInfo struct {
	ARN, ID, StartedBy, ClientToken string
	TaskDefinitionArn               string
	LastStatus, DesiredStatus       string
	StopCode, StoppedReason         string
	Version                         int64
	// Env is the container's whole environment as given to its process
	// (secrets included), once the task has launched.
	Env map[string]string
	// Args is the container's process: program and arguments, once the
	// task has launched.
	Args []string
	// Command is the override's command, if any.
	Command []string
	Tags    map[string]string
	// Root is the task's storage on the host: a host program's own
	// storage and working folder, a container's log.
	Root string
	// Workspace is the host folder GALLEY_WORKSPACE names, if set: below
	// a mounted file system's folder, or in the task's own storage (a
	// container's own file system, known once the container runs and
	// gone once it stopped, as a Fargate task's ephemeral storage).
	Workspace string
	ExitCode  *int
	Launched  bool
}

// Tasks returns every task, in creation order, invisible ones included.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskInfo, 0, len(s.order))
	for _, t := range s.order {
		ti := TaskInfo{
			ARN: t.arn, ID: t.id, StartedBy: t.startedBy, ClientToken: t.clientToken, TaskDefinitionArn: t.taskDefArn,
			LastStatus: t.lastStatus, DesiredStatus: t.desiredStatus, StopCode: t.stopCode,
			StoppedReason: t.stoppedReason, Version: t.version, Env: maps.Clone(t.env),
			Args: slices.Clone(t.args), Command: slices.Clone(t.overrideCmd),
			Tags: map[string]string{}, Root: t.root, Workspace: t.workspace, Launched: t.launched,
		}
		for _, tg := range t.tags {
			ti.Tags[tg.Key] = tg.Value
		}
		if t.exitCode != nil {
			c := *t.exitCode
			ti.ExitCode = &c
		}
		out = append(out, ti)
	}
	return out
}

func validateTags(tags []tag) *awswire.Error {
	if len(tags) > 50 {
		return invalid("a resource takes at most 50 tags")
	}
	seen := map[string]bool{}
	for _, tg := range tags {
		switch {
		case tg.Key == "" || len([]rune(tg.Key)) > 128:
			return invalid("a tag key must be 1 to 128 characters")
		case len([]rune(tg.Value)) > 256:
			return invalid("a tag value must be at most 256 characters")
		case strings.HasPrefix(strings.ToLower(tg.Key), "aws:") || strings.HasPrefix(strings.ToLower(tg.Value), "aws:"):
			return invalid("tags starting with aws: are reserved")
		case seen[tg.Key]:
			return invalid("duplicate tag key %s", tg.Key)
		}
		seen[tg.Key] = true
	}
	return nil
}

// validateRun checks what ECS checks of a Fargate RunTask's parameters.
func validateRun(in runTaskInput) *awswire.Error {
	switch {
	case in.TaskDefinition == "":
		return invalid("TaskDefinition can not be blank.")
	case in.Count != nil && *in.Count != 1:
		return invalid("the stand-in runs one task per RunTask, not %d", *in.Count)
	case in.LaunchType != "" && len(in.CapacityProviderStrategy) > 0:
		return invalid("Specifying both a launch type and capacity provider strategy is not supported. Remove one and try again.")
	case in.LaunchType != "" && in.LaunchType != "FARGATE":
		return invalid("the stand-in runs Fargate tasks only, not launch type %s", in.LaunchType)
	case in.LaunchType == "" && len(in.CapacityProviderStrategy) == 0:
		return invalid("the stand-in runs Fargate tasks only: name launch type FARGATE or a capacity provider")
	case in.NetworkConfiguration == nil || in.NetworkConfiguration.AwsvpcConfiguration == nil ||
		len(in.NetworkConfiguration.AwsvpcConfiguration.Subnets) == 0:
		return invalid("Network Configuration must be provided when networkMode 'awsvpc' is specified.")
	case in.StartedBy != "" && !startedByRE.MatchString(in.StartedBy):
		return invalid("startedBy may hold up to 128 letters, digits, '-', '_' and '/'")
	case len(in.ClientToken) > 64 || !printable(in.ClientToken):
		return invalid("clientToken must be 1 to 64 ASCII characters from 33 to 126")
	}
	if a := in.NetworkConfiguration.AwsvpcConfiguration.AssignPublicIP; a != "" && a != "ENABLED" && a != "DISABLED" {
		return invalid("assignPublicIp must be ENABLED or DISABLED")
	}
	for _, cp := range in.CapacityProviderStrategy {
		if cp.CapacityProvider != "FARGATE" && cp.CapacityProvider != "FARGATE_SPOT" {
			return invalid("The specified capacity provider %s is not in an ACTIVE state.", cp.CapacityProvider)
		}
	}
	if e := validateTags(in.Tags); e != nil {
		return e
	}
	if in.Overrides != nil {
		if b, _ := json.Marshal(in.Overrides); len(b) > maxOverrides {
			return invalid("Container Overrides length must be at most %d", maxOverrides)
		}
		for _, role := range []string{in.Overrides.TaskRoleArn, in.Overrides.ExecutionRoleArn} {
			if role != "" && !roleArnRE.MatchString(role) {
				return clientErr("Role is not valid")
			}
		}
		for _, co := range in.Overrides.ContainerOverrides {
			for _, kv := range co.Environment {
				if !envNameRE.MatchString(kv.Name) {
					return invalid("environment variable name %q is not valid", kv.Name)
				}
			}
		}
	}
	return nil
}

// validateAgainstDef checks the request against the task definition it
// names, as ECS does.
func validateAgainstDef(in runTaskInput, d *taskDef) *awswire.Error {
	if !d.fargate {
		return invalid("Task definition does not support launch_type FARGATE.")
	}
	if in.Overrides != nil {
		for _, co := range in.Overrides.ContainerOverrides {
			if !slices.ContainsFunc(d.ContainerDefinitions, func(c ContainerDefinition) bool { return c.Name == co.Name }) {
				return invalid("Override for container named %s is not a container in the TaskDefinition.", co.Name)
			}
		}
	}
	if len(d.ContainerDefinitions) != 1 {
		return clientErr("the ECS stand-in runs tasks of one container only; %s has %d", d.arn, len(d.ContainerDefinitions))
	}
	return nil
}

// runTask serves RunTask: a clientToken seen before with the same request
// answers the task it made; with another request, ConflictException.
func (s *Server) runTask(in runTaskInput, body []byte) (any, *awswire.Error) {
	if e := validateRun(in); e != nil {
		return nil, e
	}
	fp := fingerprint(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, awswire.Errorf(500, "ServerException", "the stand-in is shutting down")
	}
	cl, e := s.clusterLocked(in.Cluster)
	if e != nil {
		return nil, e
	}
	d := s.lookupTaskDefLocked(in.TaskDefinition)
	if d == nil {
		return nil, clientErr("TaskDefinition not found.")
	}
	if e := validateAgainstDef(in, d); e != nil {
		return nil, e
	}
	tokenKey := cl.name + "\x00" + in.ClientToken
	if in.ClientToken != "" {
		if rec, ok := s.tokenLocked(tokenKey); ok {
			t := s.tasks[rec.taskID]
			if rec.fingerprint != fp {
				return nil, &awswire.Error{Status: 400, Code: "ConflictException", Fields: map[string]any{"resourceIds": []string{t.arn}},
					Message: "The specified client token is already in use with a different RunTask request."}
			}
			return map[string]any{"tasks": []wireTask{s.render(t, false, false)}, "failures": []failure{}}, nil
		}
	}
	c := d.ContainerDefinitions[0]
	now := time.Now()
	id := newID()
	t := &task{
		id: id, clusterArn: cl.arn, taskDefArn: d.arn, family: d.Family, revision: strconv.Itoa(d.revision), def: d,
		container: c.Name, image: c.Image, taskRole: d.TaskRoleArn, execRole: d.ExecutionRoleArn,
		credID: awswire.UUID(), metaID: awswire.UUID(),
		arn:       fmt.Sprintf("arn:aws:ecs:%s:%s:task/%s/%s", s.region, s.account, cl.name, id),
		startedBy: in.StartedBy, group: in.Group, clientToken: in.ClientToken,
		launchType: in.LaunchType, platformVersion: in.PlatformVersion,
		tags: slices.Clone(in.Tags), lastStatus: statusProvisioning, desiredStatus: statusRunning,
		createdAt: now, visibleAt: now.Add(s.visibility),
		containerArn:    fmt.Sprintf("arn:aws:ecs:%s:%s:container/%s/%s/%s", s.region, s.account, cl.name, id, awswire.UUID()),
		containerStatus: statusPending,
		// The task's storage is its localproc workspace; the exit code
		// lies outside it, where the command cannot write.
		root:      filepath.Join(s.procs.WorkspacesDir(), id),
		exitFile:  filepath.Join(s.dir, "tasks", id+".exit"),
		readyFile: filepath.Join(s.dir, "tasks", id+".ready"),
	}
	if t.group == "" {
		t.group = "family:" + d.Family
	}
	if len(in.CapacityProviderStrategy) > 0 {
		t.capacityProvider = in.CapacityProviderStrategy[0].CapacityProvider
	}
	if t.platformVersion == "" || t.platformVersion == "LATEST" {
		t.platformVersion = "1.4.0"
	}
	t.overrides = taskOverride{ContainerOverrides: []containerOverride{}}
	if in.Overrides != nil {
		t.overrides = *in.Overrides
		if t.overrides.ContainerOverrides == nil {
			t.overrides.ContainerOverrides = []containerOverride{}
		}
		if in.Overrides.TaskRoleArn != "" {
			t.taskRole = in.Overrides.TaskRoleArn
		}
		if in.Overrides.ExecutionRoleArn != "" {
			t.execRole = in.Overrides.ExecutionRoleArn
		}
		for _, co := range in.Overrides.ContainerOverrides {
			t.overrideEnv = append(t.overrideEnv, co.Environment...)
			if co.Command != nil {
				t.overrideCmd = slices.Clone(co.Command)
			}
		}
	}
	// Where GALLEY_WORKSPACE will be, as far as the request tells (a
	// secret may still change it at launch).
	img, _ := s.image(t.image)
	_, t.ctr = s.containerImage(t.image)
	if t.ctr {
		img = Image{}
	}
	t.workspace = s.hostWorkspace(t, s.containerEnv(t, img, nil))
	s.tasks[id] = t
	s.order = append(s.order, t)
	if in.ClientToken != "" {
		s.tokens[tokenKey] = tokenRecord{fingerprint: fp, taskID: id, at: s.clock()}
	}
	s.changedLocked(t, now)
	s.launches.Add(1)
	go s.launch(t)
	return map[string]any{"tasks": []wireTask{s.render(t, false, false)}, "failures": []failure{}}, nil
}

// containerEnv builds the container's environment as Fargate does: the
// image's, the definition's, the secrets, the override's, then what the
// ECS agent adds. Nothing comes from the host.
func (s *Server) containerEnv(t *task, img Image, secrets map[string]string) map[string]string {
	env := maps.Clone(img.Env)
	if env == nil {
		env = map[string]string{}
	}
	for _, kv := range t.def.ContainerDefinitions[0].Environment {
		env[kv.Name] = kv.Value
	}
	maps.Copy(env, secrets)
	for _, kv := range t.overrideEnv {
		env[kv.Name] = kv.Value
	}
	env["AWS_REGION"] = s.region
	env["AWS_DEFAULT_REGION"] = s.region
	env["AWS_EXECUTION_ENV"] = "AWS_ECS_FARGATE"
	endpoint := s.endpointURL
	if t.ctr && s.ctrNet.TaskEndpoint != "" {
		endpoint = s.ctrNet.TaskEndpoint
	}
	env["ECS_CONTAINER_METADATA_URI"] = endpoint + "/v3/" + t.metaID
	env["ECS_CONTAINER_METADATA_URI_V4"] = endpoint + "/v4/" + t.metaID
	if t.taskRole != "" {
		// Fargate's agent sets the RELATIVE_URI form (to 169.254.170.2);
		// the stand-in's endpoint is on loopback, which the SDKs accept
		// only as a full URI.
		env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = endpoint + "/v2/credentials/" + t.credID
	}
	return env
}

// mounts returns t's container's EFS mounts: container path to host folder
// (empty for a file system or access point the stand-in does not know).
func (s *Server) mounts(t *task) map[string]string {
	vols := map[string]Volume{}
	for _, v := range t.def.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, mp := range t.def.ContainerDefinitions[0].MountPoints {
		if efs := vols[mp.SourceVolume].EFSVolumeConfiguration; efs != nil {
			dir, _, _ := s.mountRoot(efs)
			out[filepath.Clean(mp.ContainerPath)] = dir
		}
	}
	return out
}

// HostPath returns where the container path p of a task lies on the
// host (for tests that look at a task's files as an attacker in another
// task cannot): below the host folder of a mounted file system, else in
// the task's own storage (a container's own file system while it runs).
// It answers "" for a task it does not know or a container that is not
// running yet.
func (s *Server) HostPath(taskID, p string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[taskID]
	if t == nil {
		return ""
	}
	return s.hostPath(t, p)
}

// hostPath returns where the container path p lies on the host: below
// the host folder of a mounted file system, else in the task's own
// storage (a container's own file system, "" until it runs).
func (s *Server) hostPath(t *task, p string) string {
	p = filepath.Clean("/" + p)
	for cp, dir := range s.mounts(t) {
		if rel, err := filepath.Rel(cp, p); err == nil && dir != "" && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(dir, rel)
		}
	}
	if t.ctr {
		if t.ctrRoot == "" {
			return ""
		}
		return filepath.Join(t.ctrRoot, p)
	}
	return filepath.Join(t.root, p)
}

func (s *Server) hostWorkspace(t *task, env map[string]string) string {
	if ws := env["GALLEY_WORKSPACE"]; ws != "" {
		return s.hostPath(t, ws)
	}
	return ""
}

// prepare does what Fargate does before it starts a container: read the
// secrets as the execution role, pull the image, set up the task role and
// the volumes. It returns the container's environment and image, or the
// stoppedReason of a task that failed to start.
func (s *Server) prepare(t *task) (map[string]string, Image, string) {
	s.mu.Lock()
	execRole, secrets, ref, role := t.execRole, t.def.ContainerDefinitions[0].Secrets, t.image, t.taskRole
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), secretsTimeout)
	defer cancel()
	values, reason := s.resolveSecrets(ctx, execRole, secrets)
	if reason != "" {
		return nil, Image{}, reason
	}
	img, ok := s.image(ref)
	if _, isCtr := s.containerImage(ref); isCtr {
		img, ok = Image{}, true // the image holds its own configuration
	}
	if !ok {
		return nil, Image{}, "CannotPullContainerError: pull image manifest has been retried 1 time(s): failed to resolve ref " + ref + ": not found"
	}
	if role != "" && s.taskCreds == nil {
		return nil, Image{}, "ResourceInitializationError: the ECS stand-in cannot serve task role " + role + ": no task credentials (WithTaskCredentials)"
	}
	for cp, dir := range s.mounts(t) {
		if dir == "" {
			return nil, Image{}, "ResourceInitializationError: failed to invoke EFS utils commands to set up EFS volumes: the ECS stand-in knows no file system or access point for the volume at " + cp + " (WithFileSystem, WithAccessPoint)"
		}
	}
	for _, v := range t.def.Volumes {
		if efs := v.EFSVolumeConfiguration; efs != nil {
			if dir, ap, ok := s.mountRoot(efs); ok {
				if ap != nil && ap.PosixUser != nil {
					// EFS would run every file operation of the mount as
					// that user; a bind mount cannot, so the task would
					// run with other permissions than on AWS. Refused, not
					// run unlike AWS (docs/runtime-ecs.md, The stand-in).
					return nil, Image{}, fmt.Sprintf("ResourceInitializationError: the ECS stand-in does not model access point %s's PosixUser (%d:%d): "+
						"EFS makes every file operation through the mount as that user, a bind mount cannot", efs.AuthorizationConfig.AccessPointID, ap.PosixUser.UID, ap.PosixUser.GID)
				}
				if reason := ensureRoot(s.fileSystems[efs.FileSystemID], dir, ap); reason != "" {
					return nil, Image{}, reason
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.containerEnv(t, img, values), img, ""
}

// launch starts t's process, unless t was stopped first or cannot start.
func (s *Server) launch(t *task) {
	defer s.launches.Done()
	failed := s.holdProvisioning(t)
	s.mu.Lock()
	if t.desiredStatus == statusStopped || s.closed {
		s.stoppedLocked(t, "TaskFailedToStart", nil)
		s.mu.Unlock()
		return
	}
	now := time.Now()
	t.lastStatus, t.pullStartedAt = statusPending, now
	s.changedLocked(t, now)
	s.mu.Unlock()

	env, img, reason := s.prepare(t)
	if failed != "" {
		reason = failed
	}

	s.mu.Lock()
	if reason != "" {
		s.log.Info("task failed to start", "task", t.arn, "reason", reason)
		if t.stopCode == "" {
			t.stopCode, t.stoppedReason = "TaskFailedToStart", reason
		}
		s.stoppedLocked(t, "TaskFailedToStart", nil)
		s.mu.Unlock()
		return
	}
	if t.desiredStatus == statusStopped || s.closed {
		s.stoppedLocked(t, "TaskFailedToStart", nil)
		s.mu.Unlock()
		return
	}
	c := t.def.ContainerDefinitions[0]
	t.env, t.args = env, processArgs(img, c, t.overrideCmd)
	t.workspace = s.hostWorkspace(t, env)
	if ci, ok := s.containerImage(t.image); ok {
		s.mu.Unlock()
		root, err := s.startContainer(t, ci, maps.Clone(env))
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.log.Error("task failed to start", "task", t.arn, "err", err)
			t.stopCode, t.stoppedReason = "TaskFailedToStart", "CannotStartContainerError: "+err.Error()
			s.stoppedLocked(t, "", nil)
			return
		}
		t.ctrRoot = root
		t.workspace = s.hostWorkspace(t, env)
		t.launched, t.pullStoppedAt = true, time.Now()
		return
	}
	workDir := c.WorkingDirectory
	if workDir == "" {
		workDir = img.WorkingDir
	}
	dir := s.hostPath(t, workDir)
	run := maps.Clone(env)
	if t.workspace != "" {
		run["GALLEY_WORKSPACE"] = t.workspace
	}
	args := slices.Clone(t.args)
	s.mu.Unlock()

	err := s.start(t, run, args, dir)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Error("task failed to start", "task", t.arn, "err", err)
		t.stopCode, t.stoppedReason = "TaskFailedToStart", "CannotStartContainerError: "+err.Error()
		s.stoppedLocked(t, "", nil)
		return
	}
	// PENDING until the init says its command started (sweep).
	t.launched, t.pullStoppedAt = true, time.Now()
}

// start writes t's storage and starts its init through localproc.
func (s *Server) start(t *task, env map[string]string, args []string, dir string) error {
	if len(args) == 0 {
		return fmt.Errorf("no command: neither the task definition nor the image %s names one", t.image)
	}
	for _, d := range []string{t.root, dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if t.workspace != "" {
		if err := os.MkdirAll(filepath.Dir(t.workspace), 0o700); err != nil {
			return err
		}
	}
	l := launch{Standin: launchVersion, Command: args, Dir: dir, ExitFile: t.exitFile, ReadyFile: t.readyFile}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		l.Env = append(l.Env, k+"="+env[k])
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	// The launch travels in the worker's token file (mode 600): localproc
	// has no other per-worker channel, and the entrypoint reads it.
	return s.procs.Start(context.Background(), service.WorkerSpec{
		Handle: t.id, Token: string(b), IdempotencyToken: t.clientToken,
		WorkspacePath: t.root, Branch: env["GALLEY_BRANCH"],
	})
}
