package stack

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// addWorkers makes the network (addNetwork), the cluster and the worker
// task definitions, one per agent family (addWorkerTask). Worker tasks run
// in isolated subnets with no public IP: they reach the galley API, the
// model providers, the git host and SQS only through the egress proxy
// (addEgressProxy), and AWS only through the VPC endpoints (addEndpoints).
func (g *Galley) addWorkers() error {
	cfg := g.Config
	g.addNetwork()

	g.Cluster = awsecs.NewCluster(g.Stack, jsii.String("Cluster"), &awsecs.ClusterProps{
		Vpc:                 g.Vpc,
		ContainerInsightsV2: awsecs.ContainerInsights_ENABLED,
	})

	g.TaskRole = awsiam.NewRole(g.Stack, jsii.String("WorkerTaskRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
		Description: jsii.String("galley worker task: mounts the git object cache, keeps the worktrees' snapshots; reads no secret"),
	})
	// The execution role is ECS's, never the task's: it pulls the image,
	// writes the logs and reads the provider keys and the git credential
	// once, at task start, into the container's environment.
	g.ExecutionRole = awsiam.NewRole(g.Stack, jsii.String("WorkerExecutionRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
		Description: jsii.String("galley worker task execution: pulls the image, writes the task's logs, injects the provider and git secrets"),
	})
	g.addWorkspaces()
	g.addSnapshots()
	g.WorkerLogs = g.logGroup("WorkerLogs")

	exclude, err := dockerIgnore(filepath.Join(cfg.WorkerContext, filepath.Dir(cfg.WorkerDockerfile), ".dockerignore"))
	if err != nil {
		return err
	}
	g.TaskDefinitions = map[string]awsecs.FargateTaskDefinition{}
	g.WorkerImages = map[string]awsecrassets.DockerImageAsset{}
	for _, family := range cfg.AgentFamilies {
		g.addWorkerTask(family, exclude)
	}
	// The default, for an agent without an image of its own (the scripted
	// agent, which every image's harness carries), and the egress proxy's
	// image: the first family's.
	g.TaskDefinition = g.TaskDefinitions[cfg.AgentFamilies[0]]
	g.WorkerImage = g.WorkerImages[cfg.AgentFamilies[0]]
	return nil
}

// WorkerTarget is the worker/Dockerfile target of an agent family's image:
// the harness, git and that family's CLI alone.
func WorkerTarget(family string) string { return "worker-" + family }

// WorkerTaskFamily is the ECS task definition family of an agent family's
// workers.
func (c Config) WorkerTaskFamily(family string) string { return c.Prefix() + "-worker-" + family }

// workerTaskDefinitionArns are the ARNs of every worker task definition,
// in AgentFamilies' order: what a function that launches or resumes
// workers may run.
func (g *Galley) workerTaskDefinitionArns() []*string {
	var out []*string
	for _, family := range g.Config.AgentFamilies {
		out = append(out, g.TaskDefinitions[family].TaskDefinitionArn())
	}
	return out
}

// addWorkerTask makes one agent family's image asset (its worker/Dockerfile
// target) and task definition. Every family's task shares the roles, the
// git object cache, the log group and the configuration; only the image
// differs.
func (g *Galley) addWorkerTask(family string, exclude []*string) {
	cfg := g.Config
	id := titled(family)
	td := awsecs.NewFargateTaskDefinition(g.Stack, jsii.String("WorkerTask"+id), &awsecs.FargateTaskDefinitionProps{
		Family:         jsii.String(cfg.WorkerTaskFamily(family)),
		Cpu:            jsii.Number(float64(cfg.WorkerCPU)),
		MemoryLimitMiB: jsii.Number(float64(cfg.WorkerMemory)),
		RuntimePlatform: &awsecs.RuntimePlatform{
			CpuArchitecture:       awsecs.CpuArchitecture_ARM64(),
			OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
		},
		TaskRole:      g.TaskRole,
		ExecutionRole: g.ExecutionRole,
		// The worktree, the image and the agent's home and temporary
		// files share it (DefaultWorkerEphemeralStorageGiB).
		EphemeralStorageGiB: jsii.Number(float64(cfg.WorkerEphemeralStorageGiB)),
	})
	image := awsecrassets.NewDockerImageAsset(g.Stack, jsii.String("WorkerImage"+id), &awsecrassets.DockerImageAssetProps{
		Directory:  jsii.String(cfg.WorkerContext),
		File:       jsii.String(cfg.WorkerDockerfile),
		Target:     jsii.String(WorkerTarget(family)),
		Platform:   awsecrassets.Platform_LINUX_ARM64(),
		Exclude:    &exclude,
		IgnoreMode: awscdk.IgnoreMode_DOCKER,
		// zstd layers: smaller than gzip's and faster to unpack, which is
		// a large part of a Fargate start (platform 1.4 pulls them;
		// docs/worker-image.md says what reaches ECR with which builder).
		Outputs: jsii.Strings(WorkerImageOutput),
	})
	g.TaskDefinitions[family] = td
	g.WorkerImages[family] = image
	td.AddVolume(&awsecs.Volume{
		Name: jsii.String(gitCacheVolume),
		EfsVolumeConfiguration: &awsecs.EfsVolumeConfiguration{
			FileSystemId:      g.Workspaces.FileSystemId(),
			TransitEncryption: jsii.String("ENABLED"),
			// IAM authorization: the mount is made with the task role, which
			// may mount only through the access point.
			AuthorizationConfig: &awsecs.AuthorizationConfig{
				AccessPointId: g.GitCacheAccessPoint.AccessPointId(),
				Iam:           jsii.String("ENABLED"),
			},
		},
	})
	linux := awsecs.NewLinuxParameters(g.Stack, jsii.String("WorkerLinux"+id), &awsecs.LinuxParametersProps{
		// An init process reaps the agents' child processes.
		InitProcessEnabled: jsii.Bool(true),
	})
	// Fargate can add no capability but SYS_PTRACE, so the harness keeps
	// what it needs by dropping every other one of Docker's defaults.
	linux.DropCapabilities(WorkerDroppedCapabilities()...)
	workerEnv := g.workerEnv()
	worker := td.AddContainer(jsii.String(contract.WorkerContainer), &awsecs.ContainerDefinitionOptions{
		ContainerName:   jsii.String(contract.WorkerContainer),
		Image:           awsecs.ContainerImage_FromDockerImageAsset(image),
		Essential:       jsii.Bool(true),
		LinuxParameters: linux,
		// The harness reports its outcome on SIGTERM; Fargate's maximum.
		StopTimeout: awscdk.Duration_Seconds(jsii.Number(120)),
		Logging: awsecs.LogDriver_AwsLogs(&awsecs.AwsLogDriverProps{
			StreamPrefix: jsii.String("worker"),
			LogGroup:     g.WorkerLogs,
		}),
		// Configuration only.
		Environment: &workerEnv,
		// ECS reads these with the execution role at task start (the
		// definition holds only the ARNs), so the task role, which the
		// agent might reach, needs no secret; a value put later reaches
		// only tasks started later.
		Secrets: &map[string]awsecs.Secret{
			contract.EnvAnthropicAPIKey: awsecs.Secret_FromSecretsManager(g.ProviderSecrets[SecretAnthropic], nil),
			contract.EnvOpenAIAPIKey:    awsecs.Secret_FromSecretsManager(g.ProviderSecrets[SecretOpenAI], nil),
			contract.EnvGitCredential:   awsecs.Secret_FromSecretsManager(g.ProviderSecrets[SecretGit], nil),
			// The harness proves itself to the egress proxy with it.
			contract.EnvEgressSecret: awsecs.Secret_FromSecretsManager(g.EgressSecret, nil),
		},
	})
	worker.AddMountPoints(&awsecs.MountPoint{
		ContainerPath: jsii.String(contract.GitCacheMount),
		SourceVolume:  jsii.String(gitCacheVolume),
		ReadOnly:      jsii.Bool(false),
	})
}

// WorkerImageOutput is the worker image assets' build output: an image
// whose layers are zstd-compressed (buildx's image exporter; recompressed
// even where a base layer came gzipped).
const WorkerImageOutput = "type=image,oci-mediatypes=true,compression=zstd,force-compression=true"

// workerEnv is every worker container's plain environment: configuration
// only, the same for every family.
func (g *Galley) workerEnv() map[string]*string {
	cfg := g.Config
	workerEnv := map[string]*string{
		contract.EnvHouse:          jsii.String(cfg.House),
		contract.EnvRepository:     jsii.String(cfg.Repository),
		contract.EnvWorkerEndpoint: g.Endpoint,
		// Each worktree a folder below it, on the task's own storage; no
		// workspace root: nothing of it outlives the task but its
		// snapshot.
		contract.EnvWorkspace: jsii.String(contract.DefaultWorkspace),
		// The git object cache, on EFS: shared by every task of the house.
		contract.EnvGitCache:    jsii.String(contract.GitCacheMount),
		contract.EnvGitUsername: jsii.String(cfg.GitUsername),
		// The task's only way out, and what the agent may reach by it.
		contract.EnvEgressUpstream: jsii.String(cfg.EgressUpstream()),
		contract.EnvEgressAllow:    jsii.String(strings.Join(cfg.EgressAllowlist, ",")),
		contract.EnvAgentNetwork:   jsii.String(contract.AgentNetworkTask),
		// The worktree's snapshots, saved at the worker's end and restored
		// by a launch that reuses the worktree.
		contract.EnvSnapshotBucket: g.Snapshots.BucketName(),
	}
	if cfg.ParkAfter > 0 {
		// A worker whose agent waits on its coordinator this long is
		// parked: its task ends, and a reply starts a new one.
		workerEnv[contract.EnvParkAfter] = jsii.String(cfg.ParkAfter.String())
	}
	if cfg.ModelCapTokens > 0 {
		workerEnv[contract.EnvModelCapTokens] = jsii.String(strconv.FormatInt(cfg.ModelCapTokens, 10))
	}
	if cfg.ModelCapUSD != "" {
		workerEnv[contract.EnvModelCapUSD] = jsii.String(cfg.ModelCapUSD)
	}
	if cfg.AnthropicBaseURL != "" {
		workerEnv[contract.EnvAnthropicBaseURL] = jsii.String(cfg.AnthropicBaseURL)
	}
	if cfg.OpenAIBaseURL != "" {
		workerEnv[contract.EnvOpenAIBaseURL] = jsii.String(cfg.OpenAIBaseURL)
	}
	return workerEnv
}

// gitCacheVolume names the task definition's EFS volume, the git object
// cache's.
const gitCacheVolume = "git-cache"

// DefaultWorkerEphemeralStorageGiB is a worker task's own storage unless
// context workerEphemeralStorageGiB says otherwise. Fargate gives 20 GiB
// free and bills each GiB above at $0.000111 an hour (us-east-1); 30 GiB
// adds $0.0011 an hour, about 2 % of the default task's $0.047. What
// shares it: the image (at most 1.0 GB uncompressed), the clone with the cache's
// packs copied in (520 MB for galley's own repository), the worktree's
// files, which a snapshot may hold up to its 4 GiB budget
// (snapshot.DefaultLimits) and which a restore holds twice for a moment
// (the restored copy is staged beside the clone before the swap), and
// the agent's home and temporary files (npm's and Go's caches, build
// output): about 15 GiB in a heavy case, so the default leaves twice
// that. A fuller disk fails the agent's writes and the task alone.
const DefaultWorkerEphemeralStorageGiB = 30

// WorkerCapabilities are the capabilities the worker container keeps, of
// Docker's defaults: the harness starts as root and runs the agent under a
// uid of its own, and keeps exactly what that calls for
// (harness.UIDCapabilities says which call needs each; docs/security.md).
// CHOWN gives the worktree, home and tmp to the agent's uid and back;
// DAC_OVERRIDE walks and removes what the agent has closed; FOWNER sets the
// mode of the worktree once the agent owns it and removes the agent's
// files from sticky folders; KILL stops an agent of another uid; SETUID
// and SETGID become it.
var WorkerCapabilities = []awsecs.Capability{
	awsecs.Capability_CHOWN,
	awsecs.Capability_DAC_OVERRIDE,
	awsecs.Capability_FOWNER,
	awsecs.Capability_KILL,
	awsecs.Capability_SETGID,
	awsecs.Capability_SETUID,
}

// DockerDefaultCapabilities are the capabilities a container gets unless
// its definition drops them (moby's oci/caps defaults), which is every one
// a Fargate container can hold without adding SYS_PTRACE.
var DockerDefaultCapabilities = []awsecs.Capability{
	awsecs.Capability_AUDIT_WRITE,
	awsecs.Capability_CHOWN,
	awsecs.Capability_DAC_OVERRIDE,
	awsecs.Capability_FOWNER,
	awsecs.Capability_FSETID,
	awsecs.Capability_KILL,
	awsecs.Capability_MKNOD,
	awsecs.Capability_NET_BIND_SERVICE,
	awsecs.Capability_NET_RAW,
	awsecs.Capability_SETFCAP,
	awsecs.Capability_SETGID,
	awsecs.Capability_SETPCAP,
	awsecs.Capability_SETUID,
	awsecs.Capability_SYS_CHROOT,
}

// WorkerDroppedCapabilities are Docker's defaults the worker container
// drops: all but WorkerCapabilities, in DockerDefaultCapabilities' order.
func WorkerDroppedCapabilities() []awsecs.Capability {
	var out []awsecs.Capability
	for _, c := range DockerDefaultCapabilities {
		if !slices.Contains(WorkerCapabilities, c) {
			out = append(out, c)
		}
	}
	return out
}
