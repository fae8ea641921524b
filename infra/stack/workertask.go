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
// task definition. Worker tasks run in isolated subnets with no public
// IP: they reach the galley API, the model providers, the git host and
// SQS only through the egress proxy (addEgressProxy), and AWS only
// through the VPC endpoints (addEndpoints).
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

	g.TaskDefinition = awsecs.NewFargateTaskDefinition(g.Stack, jsii.String("WorkerTask"), &awsecs.FargateTaskDefinitionProps{
		Family:         jsii.String(cfg.Prefix() + "-worker"),
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
	exclude, err := dockerIgnore(filepath.Join(cfg.WorkerContext, filepath.Dir(cfg.WorkerDockerfile), ".dockerignore"))
	if err != nil {
		return err
	}
	g.WorkerImage = awsecrassets.NewDockerImageAsset(g.Stack, jsii.String("WorkerImage"), &awsecrassets.DockerImageAssetProps{
		Directory:  jsii.String(cfg.WorkerContext),
		File:       jsii.String(cfg.WorkerDockerfile),
		Platform:   awsecrassets.Platform_LINUX_ARM64(),
		Exclude:    &exclude,
		IgnoreMode: awscdk.IgnoreMode_DOCKER,
	})
	g.TaskDefinition.AddVolume(&awsecs.Volume{
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
	g.WorkerLogs = g.logGroup("WorkerLogs")
	linux := awsecs.NewLinuxParameters(g.Stack, jsii.String("WorkerLinux"), &awsecs.LinuxParametersProps{
		// An init process reaps the agents' child processes.
		InitProcessEnabled: jsii.Bool(true),
	})
	// Fargate can add no capability but SYS_PTRACE, so the harness keeps
	// what it needs by dropping every other one of Docker's defaults.
	linux.DropCapabilities(WorkerDroppedCapabilities()...)
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
	worker := g.TaskDefinition.AddContainer(jsii.String(contract.WorkerContainer), &awsecs.ContainerDefinitionOptions{
		ContainerName:   jsii.String(contract.WorkerContainer),
		Image:           awsecs.ContainerImage_FromDockerImageAsset(g.WorkerImage),
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
	return nil
}

// gitCacheVolume names the task definition's EFS volume, the git object
// cache's.
const gitCacheVolume = "git-cache"

// DefaultWorkerEphemeralStorageGiB is a worker task's own storage unless
// context workerEphemeralStorageGiB says otherwise. Fargate gives 20 GiB
// free and bills each GiB above at $0.000111 an hour (us-east-1); 30 GiB
// adds $0.0011 an hour, about 2 % of the default task's $0.047. What
// shares it: the image (1.35 GB uncompressed), the clone with the cache's
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
