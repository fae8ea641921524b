package awslocal

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/galley-run/galley/local/cfntemplate"
	"github.com/galley-run/galley/local/container"
	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// EnvWorkerImage names the local container images of the worker, one per
// agent family (worker/Dockerfile's targets, built by
// scripts/worker-image.sh, which prints the value) when Config.WorkerImage
// is not set: "claude=<ref>,codex=<ref>" (ParseWorkerImages). With them, the
// stack's worker tasks run as containers (podman with runc), each family's
// task definition as its own image; without, as host programs.
const EnvWorkerImage = "GALLEY_WORKER_IMAGE"

// ParseWorkerImages reads EnvWorkerImage's value: family=ref pairs,
// comma-separated, or one ref alone, which every family's tasks run (an
// image with every CLI). The images are keyed by family, the one ref by "".
func ParseWorkerImages(v string) (map[string]string, error) {
	out := map[string]string{}
	v = strings.TrimSpace(v)
	if v == "" {
		return out, nil
	}
	if !strings.Contains(v, "=") {
		if strings.Contains(v, ",") {
			return nil, fmt.Errorf("worker images %q: want one ref, or family=ref pairs", v)
		}
		out[""] = v
		return out, nil
	}
	for _, pair := range strings.Split(v, ",") {
		family, ref, ok := strings.Cut(strings.TrimSpace(pair), "=")
		switch {
		case !ok || family == "" || ref == "":
			return nil, fmt.Errorf("worker images %q: %q is not family=ref", v, pair)
		case out[family] != "":
			return nil, fmt.Errorf("worker images %q: %s is named twice", v, family)
		}
		out[family] = ref
	}
	return out, nil
}

// Paths inside a worker container for what this machine adds.
const (
	containerCA     = "/etc/galley-aws-local/ca.pem"
	containerAgents = "/opt/galley-standin-agents"
)

// workerContainers is the container side of a stack: the runtime, the
// stack's own network, and the images by agent family ("": every family
// without one of its own).
type workerContainers struct {
	rt     *container.Runtime
	net    *container.Network
	images map[string]string
}

// HostProgramsNotice is what the stack logs when its workers run as host
// programs.
const HostProgramsNotice = "aws-local: worker tasks run as host programs, not as containers of the worker image: set " +
	EnvWorkerImage + " (scripts/worker-image.sh --print-ref) with podman and runc installed to run them as Fargate does"

// startContainers returns the container side of a stack for the images
// spec names (ParseWorkerImages), or nil when it names none. A missing
// runtime or image is an error: the operator asked for containers.
func startContainers(ctx context.Context, spec, dir, data string, log *slog.Logger) (*workerContainers, error) {
	images, err := ParseWorkerImages(spec)
	if err != nil || len(images) == 0 {
		return nil, err
	}
	rt, err := container.New(container.WithDir(filepath.Join(dir, "containers")), container.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("worker images %s: %w", spec, err)
	}
	for _, image := range images {
		if !rt.ImageExists(ctx, image) {
			return nil, fmt.Errorf("worker image %s is not in podman's storage: build it with scripts/worker-image.sh", image)
		}
	}
	n, err := rt.NewNetwork(ctx, "galley-"+shortHash(data, 10))
	if err != nil {
		return nil, fmt.Errorf("the stack's container network: %w", err)
	}
	log.Info("aws-local: worker tasks run as containers", "images", spec, "network", n.Name, "gateway", n.Gateway.String(),
		"nofile", rt.Nofile())
	if rt.Nofile() < container.FargateNofile {
		log.Warn("aws-local: worker containers get fewer open files than Fargate gives a task: this process's hard limit is lower",
			"nofile", rt.Nofile(), "fargate", container.FargateNofile)
	}
	return &workerContainers{rt: rt, net: n, images: images}, nil
}

// listen listens where worker tasks reach the stack: on the network's host
// side with containers, else on loopback.
func (w *workerContainers) listen() (net.Listener, error) {
	if w == nil {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	return w.net.Listen()
}

// listenClosed listens where this machine's programs reach the stack but
// worker tasks do not (the API, the gates, the git server, the worker
// services: a worker task reaches them through the egress service, as on
// AWS): on the network's host side, not admitted, with containers; else
// on loopback.
func (w *workerContainers) listenClosed() (net.Listener, error) {
	if w == nil {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	return w.net.ListenClosed()
}

// caIPs are the addresses the stack's TLS certificate must name besides
// loopback.
func (w *workerContainers) caIPs() []net.IP {
	if w == nil {
		return nil
	}
	return []net.IP{w.net.Gateway}
}

// ecsOptions run the worker image's tasks as containers of it, with the
// stack's CA and the stand-in agent CLIs mounted read-only, and the task
// endpoint on the network, over TLS with the stack's certificate: the SDK
// takes a credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI) over
// http only on loopback or Fargate's own address, and a container's host
// side is neither (the harness's S3 client, which keeps the worktree's
// snapshots with the task role, would refuse it).
func (w *workerContainers) ecsOptions(s *Stack, serverTLS *tls.Config) ([]ecsstandin.Option, error) {
	if w == nil {
		return nil, nil
	}
	plain, err := w.net.Listen()
	if err != nil {
		return nil, err
	}
	ln := tls.NewListener(plain, serverTLS)
	opts := []ecsstandin.Option{
		ecsstandin.WithContainers(w.rt, ecsstandin.ContainerNetwork{Name: w.net.Name, TaskEndpoint: "https://" + ln.Addr().String()}),
		ecsstandin.WithTaskEndpointListener(ln),
	}
	// The image of every family without one of its own first: a rule
	// given later wins, and each family's matches its task definition's
	// image alone.
	for _, family := range slices.Sorted(maps.Keys(w.images)) {
		img, err := w.containerImage(s, w.images[family])
		if err != nil {
			return nil, err
		}
		match := isWorkerImage
		if family != "" {
			match = func(ref string) bool { return isWorkerImage(ref) && s.imageFamily(ref) == family }
		}
		opts = append(opts, ecsstandin.WithContainerImage(match, img))
	}
	return opts, nil
}

// containerImage is how a worker task of the local image ref runs: the
// stack's CA mounted and trusted, its gates as the SDK's endpoints, and
// the stand-in agent CLIs first on its PATH unless the image's own run.
func (w *workerContainers) containerImage(s *Stack, ref string) (ecsstandin.ContainerImage, error) {
	path, err := w.rt.ImageEnv(context.Background(), ref, "PATH")
	if err != nil {
		return ecsstandin.ContainerImage{}, err
	}
	img := ecsstandin.ContainerImage{
		Ref: ref,
		Env: map[string]string{
			"AWS_ENDPOINT_URL_SQS": s.gateURLs[iamgate.SQS],
			"AWS_ENDPOINT_URL_S3":  s.gateURLs[iamgate.S3],
			"AWS_CA_BUNDLE":        containerCA,
			// The forge and the worker services are served over TLS by
			// the stack's CA: git's, Go's and the CLIs' own trust (Node's
			// and Claude Code's read NODE_EXTRA_CA_CERTS, which the
			// harness passes to the agent with SSL_CERT_FILE).
			"GIT_SSL_CAINFO":      containerCA,
			"SSL_CERT_FILE":       containerCA,
			"NODE_EXTRA_CA_CERTS": containerCA,
		},
		Mounts: []container.Mount{
			{Source: s.CAFile(), Target: containerCA, ReadOnly: true},
		},
	}
	if !s.cfg.ImageAgentCLIs {
		// The stand-in CLIs stand first, where the real image has the
		// real ones (they would call the providers' public APIs).
		img.Env["PATH"] = containerAgents + ":" + path
		img.Env["GALLEY_AGENT_BIN_DIR"] = containerAgents
		img.Mounts = append(img.Mounts, container.Mount{Source: mustAbs(s.cfg.Bin.Agents), Target: containerAgents, ReadOnly: true})
	}
	if wb := s.cfg.Options.WorkerBin; wb != "" {
		// --worker-bin: this harness, mounted in, instead of the image's.
		const at = "/opt/galley-worker-bin/harness"
		img.Mounts = append(img.Mounts, container.Mount{Source: mustAbs(wb), Target: at, ReadOnly: true})
		img.Entrypoint = []string{at}
	}
	return img, nil
}

// imageFamily is the agent family whose worker task definition, as the
// deployed template's functions name it (contract.EnvTaskDefinitionFor),
// runs the image ref; "" for none (or before the deployment).
func (s *Stack) imageFamily(ref string) string {
	if s.deploy == nil || s.model == nil {
		return ""
	}
	env := s.model.functions[s.kinds[lambdaapp.Effects]].Env
	for _, family := range strings.Split(env[contract.EnvAgentFamilies], ",") {
		td := env[contract.EnvTaskDefinitionFor(family)]
		if family == "" || td == "" {
			continue
		}
		for _, id := range s.deploy.t.OfType("AWS::ECS::TaskDefinition") {
			if s.deploy.phys[id] != td {
				continue
			}
			for _, c := range asList(s.deploy.props[id]["ContainerDefinitions"]) {
				if str(asMap(c), "Image") == ref {
					return family
				}
			}
		}
	}
	return ""
}

// checkWorkerImages refuses a deployment whose worker task definitions
// name a family that no local image runs: its tasks would run nothing of
// that family's (or another family's image).
func (s *Stack) checkWorkerImages() error {
	if s.ctrs == nil || s.ctrs.images[""] != "" {
		return nil
	}
	env := s.model.functions[s.kinds[lambdaapp.Effects]].Env
	var missing []string
	for _, family := range strings.Split(env[contract.EnvAgentFamilies], ",") {
		if family != "" && env[contract.EnvTaskDefinitionFor(family)] != "" && s.ctrs.images[family] == "" {
			missing = append(missing, family)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("aws-local: the template has a worker task definition for %s, and %s names no image for it (scripts/worker-image.sh --print-ref)",
			strings.Join(missing, ", "), EnvWorkerImage)
	}
	return nil
}

func (w *workerContainers) close() error {
	if w == nil {
		return nil
	}
	return w.net.Close()
}

// accessPoints are the template's EFS access points, as the ECS stand-in
// models them: the root directory and its creation info.
func accessPoints(tpl *cfntemplate.Template) ([]ecsstandin.Option, error) {
	var out []ecsstandin.Option
	for _, id := range tpl.OfType("AWS::EFS::AccessPoint") {
		p := tpl.Resources[id].Properties
		fsRef, _ := p["FileSystemId"].(map[string]any)
		fs, _ := fsRef["Ref"].(string)
		if fs == "" {
			return nil, fmt.Errorf("access point %s: FileSystemId is not a Ref to the template's file system", id)
		}
		ap := ecsstandin.AccessPoint{FileSystemID: efsID(fs), RootDirectory: "/"}
		if rd, ok := p["RootDirectory"].(map[string]any); ok {
			if path, ok := rd["Path"].(string); ok {
				ap.RootDirectory = path
			}
			if ci, ok := rd["CreationInfo"].(map[string]any); ok {
				uid, e1 := strconv.Atoi(fmt.Sprint(ci["OwnerUid"]))
				gid, e2 := strconv.Atoi(fmt.Sprint(ci["OwnerGid"]))
				mode, e3 := strconv.ParseUint(strings.TrimSpace(fmt.Sprint(ci["Permissions"])), 8, 32)
				if e1 != nil || e2 != nil || e3 != nil {
					return nil, fmt.Errorf("access point %s: CreationInfo %v is not literal numbers", id, ci)
				}
				ap.CreationInfo = &ecsstandin.CreationInfo{OwnerUID: uid, OwnerGID: gid, Permissions: os.FileMode(mode)}
			}
		}
		if pu, ok := p["PosixUser"].(map[string]any); ok {
			uid, _ := strconv.Atoi(fmt.Sprint(pu["Uid"]))
			gid, _ := strconv.Atoi(fmt.Sprint(pu["Gid"]))
			ap.PosixUser = &ecsstandin.PosixUser{UID: uid, GID: gid}
		}
		out = append(out, ecsstandin.WithAccessPoint("fsap-"+shortHash(id, 17), ap))
	}
	return out, nil
}

// WorkerNetwork returns the name of the stack's container network and its
// host-side address, or "" and nil when workers run as host programs.
func (s *Stack) WorkerNetwork() (string, net.IP) {
	if s.ctrs == nil {
		return "", nil
	}
	return s.ctrs.net.Name, s.ctrs.net.Gateway
}

// WorkerImageRefs returns the container images worker tasks run as, by
// agent family ("": every family without one of its own); nil for host
// programs.
func (s *Stack) WorkerImageRefs() map[string]string {
	if s.ctrs == nil {
		return nil
	}
	return maps.Clone(s.ctrs.images)
}
