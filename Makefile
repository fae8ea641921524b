# galley: `make run` serves locally, `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
BIN := $(CURDIR)/bin
RUN_FLAGS ?=
# -trimpath: builds that do not depend on where the checkout is, so a second
# checkout (a worktree, CI's fresh clone, the doc test's clone) reuses the
# build cache's packages rather than compiling the module again (about 115
# CPU-s of make test). -ldflags=-w: no DWARF, which make test's hundred test
# binaries would link for no debugger (a quarter of a link's CPU); a
# command's own -ldflags (the functions') takes its place. Exported, so the
# go commands the tests run inherit them (docs/BENCHMARKS.md, "make test's
# own time").
ifeq ($(filter -trimpath,$(GOFLAGS)),)
export GOFLAGS := $(strip $(GOFLAGS) -trimpath -ldflags=-w)
endif
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20
# The project's packages, listed (infra/ is its own module; node_modules,
# whose CDK CLI holds Go template files that are no package, is ignored by
# go.mod).
PKGS := ./cmd/... ./pkg/... ./local/... ./worker/... $(wildcard ./functions) $(wildcard ./scripts)
PKGS := $(patsubst %,%/...,$(filter-out %/...,$(PKGS))) $(filter %/...,$(PKGS))

.PHONY: run run-aws-local build build-aws-local test test-go browser-deps bench-smoke test-real-clis test-infra lint-template vet bench fuzz standins-start standins-stop clean lambdas synth synth-local deploy destroy

FUNCTIONS := effects reads mailbox workerapi reconciler operator
CDK := node_modules/.bin/cdk
HOUSE ?= main
REPOSITORY ?=
CDK_ARGS ?=
CDK_CONTEXT = -c house=$(HOUSE) $(if $(REPOSITORY),-c repository=$(REPOSITORY)) $(CDK_ARGS)
STACK_NAME = galley-$(subst _,-,$(HOUSE))
# cdk deploy asks before widening IAM, and without a terminal refuses: in CI
# (CI=true) it deploys without asking (docs/deploy.md, From CI).
APPROVAL ?= $(if $(filter true 1,$(CI)),never,broadening)
# The stack aws-local deploys on this machine: the same app, with the
# functions built for this machine's architecture, the scripted agent on
# for smoke tests, and a repository URL that the local git server serves.
LOCAL_HOUSE ?= local
LOCAL_REPOSITORY ?= https://git.galley.local/house.git
HOST_ARCH := $(if $(filter arm64 aarch64,$(shell uname -m)),arm64,x86_64)
LOCAL_TEMPLATE := cdk.out/galley-$(LOCAL_HOUSE).template.json
LOCAL_CDK_CONTEXT = -c house=$(LOCAL_HOUSE) -c repository=$(LOCAL_REPOSITORY) -c lambdaArchitecture=$(HOST_ARCH) \
	-c assetDir=bin/lambda-local -c scriptAgent=true $(CDK_ARGS)

## run: the local server on 127.0.0.1:8080, state in .galley/, ready for a kitchn binding
run: build
	$(BIN)/galley serve --default-agent script $(RUN_FLAGS)

## build: bin/galley and bin/galley-worker, the product's binaries (cmd/)
build:
	$(GO) build -o $(BIN)/galley ./cmd/galley
	$(GO) build -o $(BIN)/galley-worker ./cmd/galley-worker

## test: every test: vet, Go tests against DynamoDB Local and fauxqs (installed, started and stopped here), the CDK app
# Two steps, each of jobs run side by side: what the tests need (vet, the
# binaries and the template, the image, the browser's packages), then the
# Go tests and the CDK app's. Plain `make test` is enough: the -j is here.
# The image comes first: a cold build is the longest of the preparations.
test:
	@$(MAKE) --no-print-directory -j4 test-prep
	@$(MAKE) --no-print-directory -j2 test-go test-infra

.PHONY: test-prep
test-prep: image vet lint-template browser-deps

## image: the worker images, one per agent family, from worker/Dockerfile, built with buildah (its bases made here once; docs/worker-image.md)
.PHONY: image
image:
	scripts/worker-image.sh build > /dev/null

# The worker image's tests (worker/image_test.go) check the image of the current inputs.
test-go bench-smoke: export GALLEY_WORKER_IMAGE = $(shell scripts/worker-image.sh --print-ref)

# Each Go module's go.mod and go.sum must be what `go mod tidy` makes.
GO_MODULES := . infra tools/rie scripts/efsbench

vet:
	@bad=$$(gofmt -l $(wildcard cmd pkg local worker functions scripts)); if [ -n "$$bad" ]; then echo "not gofmt-clean: $$bad"; exit 1; fi
	$(GO) vet $(PKGS)
	cd scripts/efsbench && $(GO) vet ./...
	@for m in $(GO_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m/go.mod is not tidy: run go mod tidy there" >&2; exit 1; }; done

# More flags for make test's go test, e.g. GOTESTFLAGS=-json for a
# timeline of every package and test.
GOTESTFLAGS ?=
# The packages that hold benchmarks (bench-smoke).
BENCH_PKGS := $(sort $(patsubst %/,./%,$(dir $(shell grep -rl --include='*_test.go' '^func Benchmark' cmd pkg local worker functions scripts))))

# The real agent CLIs (worker/agent-clis' pins, installed from npm with their
# checksums) run in local/realcli; every stand-in a test needs is required.
# scripts/test-go.sh runs the tests and every benchmark once (-benchtime
# 1x, so that none rots unseen), in lanes side by side: local/e2e and
# aws-local's benchmarks, which mostly wait, beside the CPU-bound rest.
test-go:
	clis="$$(scripts/agent-clis.sh)"; \
	scripts/standins.sh run -- env GALLEY_REQUIRE_STANDINS=1 GALLEY_AWSLOCAL_BIN=$(BIN) \
	  GALLEY_AWSLOCAL_TEMPLATE=$(CURDIR)/$(LOCAL_TEMPLATE) GALLEY_REQUIRE_REAL_CLIS=1 GALLEY_AGENT_CLIS_BIN="$$clis" \
	  GALLEY_REQUIRE_BROWSER=1 GO=$(GO) GOTESTFLAGS="$(GOTESTFLAGS)" scripts/test-go.sh

# The console's browser test drives Debian's Chromium with playwright-core.
browser-deps: node_modules/.package-lock.json
	scripts/browser-deps.sh

## bench-smoke: only the benchmarks, each once (-benchtime 1x; make test runs them with the tests)
bench-smoke: build-aws-local
	scripts/standins.sh run -- env GALLEY_REQUIRE_STANDINS=1 GALLEY_AWSLOCAL_BIN=$(BIN) GALLEY_AWSLOCAL_TEMPLATE=$(CURDIR)/$(LOCAL_TEMPLATE) $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)

## test-real-clis: only the real Claude Code and Codex CLIs through galley's harness and drivers
test-real-clis:
	clis="$$(scripts/agent-clis.sh)"; GALLEY_REQUIRE_REAL_CLIS=1 GALLEY_AGENT_CLIS_BIN="$$clis" $(GO) test -count=1 -timeout 10m ./local/realcli/

test-infra: cfn-lint
	cd infra && GALLEY_REQUIRE_CFN_LINT=1 $(GO) test -count=1 -timeout 15m ./...

# cfn-lint, pinned; installed with pip when this machine has none.
CFN_LINT_VERSION := 1.51.0
# The regions whose resource schemas the templates are linted against:
# infra/stack's LintRegions (us-east-1 is the one docs/deploy.md names).
LINT_REGIONS := us-east-1 us-west-2 eu-west-1
.PHONY: cfn-lint
cfn-lint:
	@command -v cfn-lint >/dev/null || pip install --quiet "cfn-lint==$(CFN_LINT_VERSION)"

## lint-template: cfn-lint over the template synth-local writes, for each of LINT_REGIONS (findings fail; suppressions are in infra/stack/lint.go; the infra tests lint their own templates too)
lint-template: synth-local cfn-lint
	cfn-lint --regions $(LINT_REGIONS) -- $(LOCAL_TEMPLATE)

## bench: per-route latency and await wake-up figures (see docs/BENCHMARKS.md)
bench: build
	scripts/standins.sh run -- $(GO) test -run '^$$' -bench . -benchmem -count 5 ./pkg/... | tee bench.out

$(BIN)/aws-lambda-rie: tools/rie/go.mod tools/rie/go.sum
	cd tools/rie && GOBIN=$(BIN) $(GO) install tool

## build-aws-local: the functions for this machine, galley-dev (aws-local and the fault flags), the ECS stand-in, the Lambda emulator
build-aws-local: build $(BIN)/aws-lambda-rie
	for f in $(FUNCTIONS); do CGO_ENABLED=0 GOOS=linux $(GO) build -tags lambda.norpc -ldflags='-s -w' -o $(BIN)/lambda-local/$$f/bootstrap ./functions/$$f; done
	$(GO) build -o $(BIN)/galley-dev ./local/cmd/galley-dev
	$(GO) build -o $(BIN)/ecs-standin ./local/cmd/ecs-standin
	$(GO) build -o $(BIN)/standin-agents/claude ./local/standin-cli/claude
	$(GO) build -o $(BIN)/standin-agents/codex ./local/standin-cli/codex

## synth-local: the stack's template for aws-local ($(LOCAL_TEMPLATE)), functions built for this machine
synth-local: build-aws-local node_modules/.package-lock.json
	$(CDK) synth -q $(LOCAL_CDK_CONTEXT) > /dev/null

## run-aws-local: galley in its AWS shape on this machine (stand-ins started and stopped with it; galley-dev, the development binary), its workers containers of the worker image as on Fargate
run-aws-local: export GALLEY_WORKER_IMAGE = $(shell scripts/worker-image.sh --print-ref)
run-aws-local: synth-local image
	$(BIN)/galley-dev serve --stack aws-local --template $(LOCAL_TEMPLATE) $(RUN_FLAGS)

## lambdas: bin/lambda/<function>/bootstrap for provided.al2023 on arm64
lambdas:
	for f in $(FUNCTIONS); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
	    -o $(BIN)/lambda/$$f/bootstrap ./functions/$$f; \
	done

node_modules/.package-lock.json: package-lock.json
	npm ci

## synth: the stack's template with cdk-nag AwsSolutions (exit 1 on an unsuppressed error); REPOSITORY=https://... required
synth: lambdas node_modules/.package-lock.json
	@test -n "$(REPOSITORY)" || { echo "make synth needs REPOSITORY=https://... (the house repository)" >&2; exit 2; }
	$(CDK) synth -q $(CDK_CONTEXT) > /dev/null

## deploy: cdk deploy (REPOSITORY=https://... required; CDK_ARGS="-c maxWorkers=50 ..."; APPROVAL=never, the default with CI=true)
deploy: lambdas node_modules/.package-lock.json
	@test -n "$(REPOSITORY)" || { echo "make deploy needs REPOSITORY=https://..." >&2; exit 2; }
	$(CDK) deploy --require-approval $(APPROVAL) $(CDK_CONTEXT)

## destroy: stop the house's worker tasks and wait until they have, then cdk destroy without asking (HOUSE=...)
destroy: build node_modules/.package-lock.json
	cluster=$$(aws cloudformation describe-stacks --stack-name $(STACK_NAME) \
	  --query "Stacks[0].Outputs[?OutputKey=='ClusterName'].OutputValue" --output text); \
	$(BIN)/galley stop-workers --cluster "$$cluster"
	$(CDK) destroy --force $(CDK_CONTEXT)

standins-start:
	scripts/standins.sh start

standins-stop:
	scripts/standins.sh stop

clean:
	rm -rf $(BIN) bench.out
