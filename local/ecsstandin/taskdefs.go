package ecsstandin

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/local/container"
)

// TaskDefinition is a task definition as RegisterTaskDefinition takes it
// and DescribeTaskDefinition answers it (the fields the stand-in reads;
// others the SDK sends are ignored). Register one from Go with
// Server.RegisterTaskDefinition, or through the ECS API.
type TaskDefinition struct {
	Family                  string                `json:"family"`
	TaskRoleArn             string                `json:"taskRoleArn,omitempty"`
	ExecutionRoleArn        string                `json:"executionRoleArn,omitempty"`
	NetworkMode             string                `json:"networkMode,omitempty"`
	RequiresCompatibilities []string              `json:"requiresCompatibilities,omitempty"`
	CPU                     string                `json:"cpu,omitempty"`
	Memory                  string                `json:"memory,omitempty"`
	RuntimePlatform         *RuntimePlatform      `json:"runtimePlatform,omitempty"`
	Volumes                 []Volume              `json:"volumes,omitempty"`
	ContainerDefinitions    []ContainerDefinition `json:"containerDefinitions"`
	// EphemeralStorage is a Fargate task's own storage, when larger than
	// the default 20 GiB. Its size is checked as ECS checks it; it is not
	// enforced (a container's own storage here is the host's disk).
	EphemeralStorage *EphemeralStorage `json:"ephemeralStorage,omitempty"`
}

// EphemeralStorage is a task definition's ephemeralStorage.
type EphemeralStorage struct {
	SizeInGiB int `json:"sizeInGiB"`
}

// Fargate's bounds of a task's ephemeral storage, in GiB.
const (
	minEphemeralGiB = 21
	maxEphemeralGiB = 200
)

// RuntimePlatform is a task definition's operating system and CPU
// architecture.
type RuntimePlatform struct {
	OperatingSystemFamily string `json:"operatingSystemFamily,omitempty"`
	CPUArchitecture       string `json:"cpuArchitecture,omitempty"`
}

// Volume is a task definition's volume: an EFS file system, or (with
// neither) the task's ephemeral bind mount.
type Volume struct {
	Name                   string     `json:"name"`
	Host                   *HostPath  `json:"host,omitempty"`
	EFSVolumeConfiguration *EFSVolume `json:"efsVolumeConfiguration,omitempty"`
}

// HostPath is a bind mount's host path; Fargate takes none.
type HostPath struct {
	SourcePath string `json:"sourcePath,omitempty"`
}

// EFSVolume is an EFS volume's configuration.
type EFSVolume struct {
	FileSystemID        string `json:"fileSystemId"`
	RootDirectory       string `json:"rootDirectory,omitempty"`
	TransitEncryption   string `json:"transitEncryption,omitempty"`
	AuthorizationConfig *struct {
		AccessPointID string `json:"accessPointId,omitempty"`
		IAM           string `json:"iam,omitempty"`
	} `json:"authorizationConfig,omitempty"`
}

// ContainerDefinition is one container of a task definition.
type ContainerDefinition struct {
	Name             string           `json:"name"`
	Image            string           `json:"image"`
	Essential        *bool            `json:"essential,omitempty"`
	EntryPoint       []string         `json:"entryPoint,omitempty"`
	Command          []string         `json:"command,omitempty"`
	Environment      []KeyValue       `json:"environment,omitempty"`
	Secrets          []Secret         `json:"secrets,omitempty"`
	WorkingDirectory string           `json:"workingDirectory,omitempty"`
	User             string           `json:"user,omitempty"`
	LinuxParameters  *LinuxParameters `json:"linuxParameters,omitempty"`
	MountPoints      []MountPoint     `json:"mountPoints,omitempty"`
	// ReadonlyRootFilesystem and Privileged apply in container mode;
	// Fargate refuses Privileged.
	ReadonlyRootFilesystem *bool             `json:"readonlyRootFilesystem,omitempty"`
	Privileged             *bool             `json:"privileged,omitempty"`
	StopTimeout            *int              `json:"stopTimeout,omitempty"`
	LogConfiguration       *LogConfiguration `json:"logConfiguration,omitempty"`
	// Ulimits apply in container mode (else Fargate's nofile 65535, or
	// this machine's hard limit if lower: container.Runtime.Nofile).
	Ulimits []Ulimit `json:"ulimits,omitempty"`
}

// Ulimit is a container's resource limit.
type Ulimit struct {
	Name      string `json:"name"`
	SoftLimit int64  `json:"softLimit"`
	HardLimit int64  `json:"hardLimit"`
}

// KeyValue is an environment variable.
type KeyValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Secret is a variable whose value the execution role reads from Secrets
// Manager when the task starts.
type Secret struct {
	Name      string `json:"name"`
	ValueFrom string `json:"valueFrom"`
}

// LinuxParameters are a container's Linux settings. In container mode the
// capabilities and the init process are applied; the rest are those
// Fargate refuses, read only to be refused.
type LinuxParameters struct {
	InitProcessEnabled *bool `json:"initProcessEnabled,omitempty"`
	Capabilities       *struct {
		Add  []string `json:"add,omitempty"`
		Drop []string `json:"drop,omitempty"`
	} `json:"capabilities,omitempty"`
	Devices          []any `json:"devices,omitempty"`
	SharedMemorySize *int  `json:"sharedMemorySize,omitempty"`
	Tmpfs            []any `json:"tmpfs,omitempty"`
	MaxSwap          *int  `json:"maxSwap,omitempty"`
	Swappiness       *int  `json:"swappiness,omitempty"`
}

// fargateRefuses returns why Fargate cannot run container c, or nil: the
// container definition parameters ECS documents as unsupported on Fargate
// (the task definition parameters page: devices, sharedMemorySize, tmpfs,
// maxSwap, swappiness, privileged) and a capability added other than
// SYS_PTRACE (KernelCapabilities: "Tasks launched on Fargate only support
// adding the SYS_PTRACE kernel capability").
func fargateRefuses(c ContainerDefinition) *awswire.Error {
	if c.Privileged != nil && *c.Privileged {
		return clientErr("Tasks using the Fargate launch type do not support privileged mode.")
	}
	lp := c.LinuxParameters
	if lp == nil {
		return nil
	}
	for _, p := range []struct {
		name string
		set  bool
	}{
		{"devices", len(lp.Devices) > 0}, {"sharedMemorySize", lp.SharedMemorySize != nil}, {"tmpfs", len(lp.Tmpfs) > 0},
		{"maxSwap", lp.MaxSwap != nil}, {"swappiness", lp.Swappiness != nil},
	} {
		if p.set {
			return clientErr("Tasks using the Fargate launch type do not support linuxParameters.%s.", p.name)
		}
	}
	if lp.Capabilities != nil {
		for _, a := range lp.Capabilities.Add {
			if strings.TrimPrefix(strings.ToUpper(a), "CAP_") != "SYS_PTRACE" {
				return clientErr("Tasks launched on Fargate only support adding the SYS_PTRACE kernel capability; container %s adds %s.", c.Name, a)
			}
		}
	}
	return nil
}

// capabilitiesValid checks capability names as ECS does (its enum).
func capabilitiesValid(c ContainerDefinition) *awswire.Error {
	if c.LinuxParameters == nil || c.LinuxParameters.Capabilities == nil {
		return nil
	}
	for _, x := range slices.Concat(c.LinuxParameters.Capabilities.Add, c.LinuxParameters.Capabilities.Drop) {
		if x != "ALL" && !container.Known(x) {
			return clientErr("Container %s: invalid capability %s.", c.Name, x)
		}
	}
	return nil
}

// MountPoint mounts a task definition's volume in a container.
type MountPoint struct {
	SourceVolume  string `json:"sourceVolume"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// LogConfiguration is accepted and shown; the task's output goes to its
// init's log on the host.
type LogConfiguration struct {
	LogDriver string            `json:"logDriver"`
	Options   map[string]string `json:"options,omitempty"`
}

// taskDef is one registered revision. Immutable once registered.
type taskDef struct {
	TaskDefinition
	arn          string
	revision     int
	registeredAt time.Time
	cpu, memory  int  // CPU units and MiB
	fargate      bool // Fargate can run it: awsvpc and a Fargate size
	tags         []tag
}

// cluster is one cluster. Immutable once created.
type cluster struct {
	name, arn string
	tags      []tag
}

var (
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	roleArnRE    = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$`)
	cpuVCPURE    = regexp.MustCompile(`^(?i)([0-9.]+)\s*vcpu$`)
	memoryGBRE   = regexp.MustCompile(`^(?i)([0-9.]+)\s*gb$`)
	smArnPrefix  = "arn:aws:secretsmanager:"
	fargateSizes = map[int][3]int{ // cpu: memory min, max, step (MiB)
		256: {512, 2048, 0}, 512: {1024, 4096, 1024}, 1024: {2048, 8192, 1024},
		2048: {4096, 16384, 1024}, 4096: {8192, 30720, 1024},
		8192: {16384, 61440, 4096}, 16384: {32768, 122880, 8192},
	}
)

func clientErr(format string, args ...any) *awswire.Error {
	return awswire.Errorf(400, "ClientException", format, args...)
}

// units reads a task size: an integer, or "<n> vCPU" (scale 1024) / "<n> GB"
// (scale 1024) as ECS accepts them.
func units(s string, re *regexp.Regexp) (int, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return n, true
	}
	if m := re.FindStringSubmatch(s); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil && f > 0 {
			return int(f * 1024), true
		}
	}
	return 0, false
}

// fargateSize checks a task's cpu and memory against Fargate's table.
func fargateSize(cpuS, memS string) (int, int, *awswire.Error) {
	if cpuS == "" || memS == "" {
		return 0, 0, clientErr("Fargate requires that 'cpu' be defined at the task level.")
	}
	cpu, ok1 := units(cpuS, cpuVCPURE)
	mem, ok2 := units(memS, memoryGBRE)
	r, ok3 := fargateSizes[cpu]
	fits := ok1 && ok2 && ok3 && mem >= r[0] && mem <= r[1]
	if fits && cpu == 256 {
		fits = mem == 512 || mem == 1024 || mem == 2048
	} else if fits {
		fits = (mem-r[0])%r[2] == 0
	}
	if !fits {
		return 0, 0, clientErr("No Fargate configuration exists for given values: %s CPU, %s memory. See the Amazon ECS documentation for the valid values.", cpuS, memS)
	}
	return cpu, mem, nil
}

// validateTaskDefinition checks what ECS checks of a registration, and
// what the stand-in cannot serve (SSM parameters).
func validateTaskDefinition(td *TaskDefinition) (cpu, mem int, e *awswire.Error) {
	switch {
	case !nameRE.MatchString(td.Family):
		return 0, 0, clientErr("Family contains invalid characters: up to 255 letters, numbers, hyphens, and underscores are allowed.")
	case len(td.ContainerDefinitions) == 0:
		return 0, 0, clientErr("Container list cannot be empty.")
	case td.TaskRoleArn != "" && !roleArnRE.MatchString(td.TaskRoleArn):
		return 0, 0, clientErr("Role is not valid")
	case td.ExecutionRoleArn != "" && !roleArnRE.MatchString(td.ExecutionRoleArn):
		return 0, 0, clientErr("Role is not valid")
	}
	switch td.NetworkMode {
	case "", "awsvpc", "bridge", "host", "none":
	default:
		return 0, 0, clientErr("Invalid networkMode: %s", td.NetworkMode)
	}
	for _, c := range td.RequiresCompatibilities {
		if c != "EC2" && c != "FARGATE" && c != "EXTERNAL" && c != "MANAGED_INSTANCES" {
			return 0, 0, clientErr("Invalid compatibility: %s", c)
		}
	}
	if rp := td.RuntimePlatform; rp != nil {
		if f := rp.OperatingSystemFamily; f != "" && f != "LINUX" && !strings.HasPrefix(f, "WINDOWS_") {
			return 0, 0, clientErr("Invalid operatingSystemFamily: %s", f)
		}
		if a := rp.CPUArchitecture; a != "" && a != "X86_64" && a != "ARM64" {
			return 0, 0, clientErr("Invalid cpuArchitecture: %s", a)
		}
	}
	fargate := slices.Contains(td.RequiresCompatibilities, "FARGATE")
	if fargate {
		if td.NetworkMode != "awsvpc" {
			return 0, 0, clientErr("Fargate only supports network mode 'awsvpc'.")
		}
		if cpu, mem, e = fargateSize(td.CPU, td.Memory); e != nil {
			return 0, 0, e
		}
	} else {
		if td.CPU != "" {
			if cpu, _ = units(td.CPU, cpuVCPURE); cpu == 0 {
				return 0, 0, clientErr("Invalid 'cpu' setting for task.")
			}
		}
		if td.Memory != "" {
			if mem, _ = units(td.Memory, memoryGBRE); mem == 0 {
				return 0, 0, clientErr("Invalid 'memory' setting for task.")
			}
		}
	}
	if es := td.EphemeralStorage; es != nil && (es.SizeInGiB < minEphemeralGiB || es.SizeInGiB > maxEphemeralGiB) {
		return 0, 0, clientErr("The ephemeral storage size must be between %d GiB and %d GiB.", minEphemeralGiB, maxEphemeralGiB)
	}
	volumes := map[string]Volume{}
	for _, v := range td.Volumes {
		switch {
		case !nameRE.MatchString(v.Name):
			return 0, 0, clientErr("Volume name is invalid: %q", v.Name)
		case volumes[v.Name].Name != "":
			return 0, 0, clientErr("Duplicate volume name: %s", v.Name)
		case v.Host != nil && v.Host.SourcePath != "" && fargate:
			return 0, 0, clientErr("Host path (%s) is not supported on Fargate.", v.Host.SourcePath)
		case v.EFSVolumeConfiguration != nil && v.EFSVolumeConfiguration.FileSystemID == "":
			return 0, 0, clientErr("Volume %s: fileSystemId is required.", v.Name)
		}
		volumes[v.Name] = v
	}
	names := map[string]bool{}
	essential := false
	for i := range td.ContainerDefinitions {
		c := &td.ContainerDefinitions[i]
		switch {
		case !nameRE.MatchString(c.Name):
			return 0, 0, clientErr("Container.name contains invalid characters.")
		case names[c.Name]:
			return 0, 0, clientErr("Duplicate container name: %s", c.Name)
		case strings.TrimSpace(c.Image) == "":
			return 0, 0, clientErr("Container.image should not be null or empty.")
		case c.Secrets != nil && td.ExecutionRoleArn == "":
			return 0, 0, clientErr("When you are specifying container secrets, you must also specify a value for 'executionRoleArn'.")
		case c.StopTimeout != nil && (*c.StopTimeout < 0 || fargate && *c.StopTimeout > 120):
			return 0, 0, clientErr("Container %s: stopTimeout must be between 0 and 120 seconds on Fargate.", c.Name)
		}
		names[c.Name] = true
		if e := capabilitiesValid(*c); e != nil {
			return 0, 0, e
		}
		if fargate {
			if e := fargateRefuses(*c); e != nil {
				return 0, 0, e
			}
		}
		if c.Essential == nil || *c.Essential {
			essential = true
		}
		for _, kv := range c.Environment {
			if kv.Name == "" {
				return 0, 0, clientErr("Container %s: an environment variable has no name.", c.Name)
			}
		}
		for _, s := range c.Secrets {
			if s.Name == "" || s.ValueFrom == "" {
				return 0, 0, clientErr("Container %s: a secret needs a name and a valueFrom.", c.Name)
			}
			if _, err := parseSecretRef(s.ValueFrom); err != nil {
				return 0, 0, clientErr("Container %s, secret %s: %v", c.Name, s.Name, err)
			}
		}
		for _, mp := range c.MountPoints {
			if _, ok := volumes[mp.SourceVolume]; !ok {
				return 0, 0, clientErr("Invalid 'sourceVolume' in mountPoint of container %s: no volume named %q.", c.Name, mp.SourceVolume)
			}
			if !strings.HasPrefix(mp.ContainerPath, "/") {
				return 0, 0, clientErr("Container %s: mountPoint containerPath must be absolute.", c.Name)
			}
		}
	}
	if !essential {
		return 0, 0, clientErr("Task definition must have at least one essential container.")
	}
	return cpu, mem, nil
}

// RegisterTaskDefinition registers a revision of td's family, as the API
// call does, and returns its ARN. For tests and for wiring from Go.
func (s *Server) RegisterTaskDefinition(td TaskDefinition) (string, error) {
	d, e := s.register(td, nil)
	if e != nil {
		return "", fmt.Errorf("ecsstandin: %s: %s", e.Code, e.Message)
	}
	return d.arn, nil
}

// CreateCluster creates the cluster name (idempotently, as ECS does) and
// returns its ARN. For tests and for wiring from Go.
func (s *Server) CreateCluster(name string) (string, error) {
	c, e := s.createCluster(name, nil)
	if e != nil {
		return "", fmt.Errorf("ecsstandin: %s: %s", e.Code, e.Message)
	}
	return c.arn, nil
}

func (s *Server) register(td TaskDefinition, tags []tag) (*taskDef, *awswire.Error) {
	cpu, mem, e := validateTaskDefinition(&td)
	if e != nil {
		return nil, e
	}
	if e := validateTags(tags); e != nil {
		return nil, e
	}
	td.ContainerDefinitions = slices.Clone(td.ContainerDefinitions)
	s.mu.Lock()
	defer s.mu.Unlock()
	rev := len(s.taskDefs[td.Family]) + 1
	_, _, notFargate := fargateSize(td.CPU, td.Memory)
	for _, c := range td.ContainerDefinitions {
		if e := fargateRefuses(c); e != nil && notFargate == nil {
			notFargate = e
		}
	}
	d := &taskDef{
		TaskDefinition: td, revision: rev, registeredAt: time.Now(), cpu: cpu, memory: mem,
		fargate: td.NetworkMode == "awsvpc" && notFargate == nil,
		arn:     fmt.Sprintf("arn:aws:ecs:%s:%s:task-definition/%s:%d", s.region, s.account, td.Family, rev),
		tags:    slices.Clone(tags),
	}
	s.taskDefs[td.Family] = append(s.taskDefs[td.Family], d)
	return d, nil
}

// lookupTaskDefLocked finds a registered revision by ARN, family:revision
// or family (its latest revision).
func (s *Server) lookupTaskDefLocked(ref string) *taskDef {
	if strings.HasPrefix(ref, "arn:") {
		i := strings.LastIndex(ref, ":task-definition/")
		if i < 0 || !strings.HasPrefix(ref, fmt.Sprintf("arn:aws:ecs:%s:%s:", s.region, s.account)) {
			return nil
		}
		ref = ref[i+len(":task-definition/"):]
		if !strings.Contains(ref, ":") {
			return nil // an ARN names a revision
		}
	}
	family, rev, hasRev := strings.Cut(ref, ":")
	revs := s.taskDefs[family]
	if len(revs) == 0 {
		return nil
	}
	if !hasRev {
		return revs[len(revs)-1]
	}
	n, err := strconv.Atoi(rev)
	if err != nil || n < 1 || n > len(revs) {
		return nil
	}
	return revs[n-1]
}

func (s *Server) createCluster(name string, tags []tag) (*cluster, *awswire.Error) {
	if name == "" {
		name = "default"
	}
	if !nameRE.MatchString(name) {
		return nil, invalid("Cluster name can only contain up to 255 letters (uppercase and lowercase), numbers, hyphens, and underscores.")
	}
	if e := validateTags(tags); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[name]; c != nil {
		return c, nil
	}
	c := &cluster{name: name, arn: s.clusterArn(name), tags: slices.Clone(tags)}
	s.clusters[name] = c
	return c, nil
}

// clusterLocked returns the cluster a request names (name or ARN; empty is
// "default"), or ECS's error.
func (s *Server) clusterLocked(ref string) (*cluster, *awswire.Error) {
	name := clusterName(ref)
	c := s.clusters[name]
	if c == nil || strings.HasPrefix(ref, "arn:") && ref != c.arn {
		return nil, awswire.Errorf(400, "ClusterNotFoundException", "Cluster not found.")
	}
	return c, nil
}

// renderTaskDef writes a revision as DescribeTaskDefinition answers it.
func (s *Server) renderTaskDef(d *taskDef) map[string]any {
	compat := []string{"EC2"}
	if d.fargate {
		compat = append(compat, "FARGATE")
	}
	out := map[string]any{
		"taskDefinitionArn": d.arn, "family": d.Family, "revision": d.revision, "status": "ACTIVE",
		"containerDefinitions": d.ContainerDefinitions, "volumes": orEmpty(d.Volumes),
		"requiresCompatibilities": orEmpty(d.RequiresCompatibilities), "compatibilities": compat,
		"registeredAt": stamp{t: d.registeredAt}, "placementConstraints": []any{}, "requiresAttributes": []any{},
	}
	for k, v := range map[string]string{"taskRoleArn": d.TaskRoleArn, "executionRoleArn": d.ExecutionRoleArn,
		"networkMode": d.NetworkMode, "cpu": d.CPU, "memory": d.Memory} {
		if v != "" {
			out[k] = v
		}
	}
	if d.EphemeralStorage != nil {
		out["ephemeralStorage"] = d.EphemeralStorage
	}
	if d.RuntimePlatform != nil {
		out["runtimePlatform"] = d.RuntimePlatform
	}
	return out
}

func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func (s *Server) renderCluster(c *cluster, tags bool) map[string]any {
	running, pending := 0, 0
	for _, t := range s.order {
		if t.clusterArn != c.arn {
			continue
		}
		switch t.lastStatus {
		case statusRunning:
			running++
		case statusProvisioning, statusPending:
			pending++
		}
	}
	out := map[string]any{
		"clusterArn": c.arn, "clusterName": c.name, "status": "ACTIVE",
		"registeredContainerInstancesCount": 0, "runningTasksCount": running, "pendingTasksCount": pending,
		"activeServicesCount": 0, "statistics": []any{}, "settings": []any{}, "capacityProviders": []any{},
		"defaultCapacityProviderStrategy": []any{},
	}
	if tags {
		out["tags"] = orEmpty(c.tags)
	}
	return out
}

type registerInput struct {
	TaskDefinition
	Tags []tag `json:"tags"`
}

func (s *Server) registerTaskDefinition(in registerInput) (any, *awswire.Error) {
	d, e := s.register(in.TaskDefinition, in.Tags)
	if e != nil {
		return nil, e
	}
	return map[string]any{"taskDefinition": s.renderTaskDef(d), "tags": orEmpty(d.tags)}, nil
}

type describeTaskDefinitionInput struct {
	TaskDefinition string   `json:"taskDefinition"`
	Include        []string `json:"include"`
}

func (s *Server) describeTaskDefinition(in describeTaskDefinitionInput) (any, *awswire.Error) {
	if in.TaskDefinition == "" {
		return nil, clientErr("TaskDefinition can not be blank.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.lookupTaskDefLocked(in.TaskDefinition)
	if d == nil {
		return nil, clientErr("Unable to describe task definition.")
	}
	out := map[string]any{"taskDefinition": s.renderTaskDef(d)}
	if slices.Contains(in.Include, "TAGS") {
		out["tags"] = orEmpty(d.tags)
	}
	return out, nil
}

type createClusterInput struct {
	ClusterName string `json:"clusterName"`
	Tags        []tag  `json:"tags"`
}

func (s *Server) createClusterOp(in createClusterInput) (any, *awswire.Error) {
	c, e := s.createCluster(in.ClusterName, in.Tags)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]any{"cluster": s.renderCluster(c, true)}, nil
}

type describeClustersInput struct {
	Clusters []string `json:"clusters"`
	Include  []string `json:"include"`
}

func (s *Server) describeClusters(in describeClustersInput) (any, *awswire.Error) {
	refs := in.Clusters
	if len(refs) == 0 {
		refs = []string{"default"}
	}
	if len(refs) > 100 {
		return nil, invalid("Clusters can name at most 100 clusters")
	}
	tags := slices.Contains(in.Include, "TAGS")
	s.mu.Lock()
	defer s.mu.Unlock()
	clusters, fails := []any{}, []failure{}
	for _, ref := range refs {
		c, e := s.clusterLocked(ref)
		if e != nil {
			arn := ref
			if !strings.HasPrefix(ref, "arn:") {
				arn = s.clusterArn(ref)
			}
			fails = append(fails, failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		clusters = append(clusters, s.renderCluster(c, tags))
	}
	return map[string]any{"clusters": clusters, "failures": fails}, nil
}
