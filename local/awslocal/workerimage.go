package awslocal

import (
	"path/filepath"
	"strings"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/iamgate"
)

// taskDefinition tells the ECS gate which roles a task of a task
// definition gets (for RunTask's implied iam:PassRole).
func (s *Stack) taskDefinition(ref string) (iamgate.TaskDefinition, bool) {
	if s.deploy == nil {
		return iamgate.TaskDefinition{}, false
	}
	for _, id := range s.deploy.t.OfType("AWS::ECS::TaskDefinition") {
		arn := s.deploy.phys[id]
		family := str(s.deploy.props[id], "Family")
		if ref == arn || ref == family || strings.HasPrefix(arn, "arn:aws:ecs:"+localRegion+":"+localAccount+":task-definition/"+ref) {
			p := s.deploy.props[id]
			return iamgate.TaskDefinition{ARN: arn, TaskRoleARN: str(p, "TaskRoleArn"), ExecutionRoleARN: str(p, "ExecutionRoleArn")}, true
		}
	}
	return iamgate.TaskDefinition{}, false
}

// isWorkerImage matches the worker image: a CDK container asset in the
// bootstrap's ECR repository. The template names it by its hash only.
func isWorkerImage(ref string) bool {
	return strings.Contains(ref, ".dkr.ecr.") && strings.Contains(ref, "/cdk-") && strings.Contains(ref, "-container-assets-")
}

// workerImage is what the worker image holds on this machine: the
// harness as its entrypoint and the stand-in agent CLIs on its PATH, with
// the image's own environment (worker/Dockerfile's ENV, the same names:
// TestWorkerImageMatchesDockerfile) pointing at them.
//
// Its tasks also reach SQS and S3 through the stack's gates
// (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_S3, trusting the stack's CA): on
// AWS the SDK's default endpoints are right. The harness waits on its own
// queue with the credentials its wake grant carries, and keeps its
// worktree's snapshots with the task role's; nothing else in the task
// calls AWS.
func (s *Stack) workerImage() ecsstandin.Image {
	img := WorkerImage(s.cfg.Bin, s.dir)
	img.Env["AWS_ENDPOINT_URL_SQS"] = s.gateURLs[iamgate.SQS]
	img.Env["AWS_ENDPOINT_URL_S3"] = s.gateURLs[iamgate.S3]
	img.Env["AWS_CA_BUNDLE"] = s.CAFile()
	return img
}

// WorkerImage is the local worker image for the binaries b, with its home
// folder under dir.
func WorkerImage(b Binaries, dir string) ecsstandin.Image {
	return ecsstandin.Image{
		Entrypoint: []string{mustAbs(b.Harness)},
		Env: map[string]string{
			"PATH":                 mustAbs(b.Agents) + ":/usr/local/bin:/usr/bin:/bin",
			"HOME":                 filepath.Join(dir, "home"),
			"GALLEY_AGENT_BIN_DIR": mustAbs(b.Agents),
			"GALLEY_WORKSPACE":     "/workspace",
			"DISABLE_AUTOUPDATER":  "1",
		},
	}
}
