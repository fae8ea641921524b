# galley: `make run` serves locally, `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
BIN := $(CURDIR)/bin
RUN_FLAGS ?=
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20
# The project's packages. Not ./...: node_modules (the pinned CDK CLI) holds
# Go template files that are no package, and infra/ is its own module.
PKGS := ./pkg/... ./local/... ./worker/... $(wildcard ./functions) $(wildcard ./scripts)
PKGS := $(patsubst %,%/...,$(filter-out %/...,$(PKGS))) $(filter %/...,$(PKGS))

.PHONY: run run-aws-local build build-aws-local test test-go test-infra vet bench fuzz standins-start standins-stop clean lambdas synth deploy

FUNCTIONS := effects reads mailbox workerapi reconciler
CDK := node_modules/.bin/cdk
HOUSE ?= main
REPOSITORY ?=
CDK_ARGS ?=
CDK_CONTEXT = -c house=$(HOUSE) $(if $(REPOSITORY),-c repository=$(REPOSITORY)) $(CDK_ARGS)

## run: the local server on 127.0.0.1:8080, state in .galley/, ready for a kitchn binding
run: build
	$(BIN)/galley serve --default-agent script $(RUN_FLAGS)

## build: bin/galley and bin/galley-worker
build:
	$(GO) build -o $(BIN)/galley ./local/cmd/galley
	$(GO) build -o $(BIN)/galley-worker ./worker/cmd/galley-worker

## test: every test: vet, Go tests against DynamoDB Local and fauxqs (installed, started and stopped here), the CDK app
test: vet build-aws-local test-go test-infra

vet:
	@bad=$$(gofmt -l $(wildcard pkg local worker functions scripts)); if [ -n "$$bad" ]; then echo "not gofmt-clean: $$bad"; exit 1; fi
	$(GO) vet $(PKGS)

test-go:
	scripts/standins.sh run -- env GALLEY_REQUIRE_STANDINS=1 GALLEY_AWSLOCAL_BIN=$(BIN) $(GO) test -count=1 -timeout 15m $(PKGS)

test-infra:
	cd infra && $(GO) test -count=1 -timeout 15m ./...

## bench: per-route latency and await wake-up figures (see docs/BENCHMARKS.md)
bench: build
	scripts/standins.sh run -- $(GO) test -run '^$$' -bench . -benchmem -count 5 ./pkg/... | tee bench.out

$(BIN)/aws-lambda-rie: tools/rie/go.mod tools/rie/go.sum
	cd tools/rie && GOBIN=$(BIN) $(GO) install tool

## build-aws-local: the functions for this machine, the ECS stand-in, the Lambda emulator
build-aws-local: build $(BIN)/aws-lambda-rie
	for f in $(FUNCTIONS); do CGO_ENABLED=0 GOOS=linux $(GO) build -tags lambda.norpc -ldflags='-s -w' -o $(BIN)/lambda-local/$$f/bootstrap ./functions/$$f; done
	$(GO) build -o $(BIN)/ecs-standin ./local/cmd/ecs-standin

## run-aws-local: galley in its AWS shape on this machine (stand-ins started and stopped with it)
run-aws-local: build-aws-local
	$(BIN)/galley serve --stack aws-local --default-agent script $(RUN_FLAGS)

## lambdas: bin/lambda/<function>/bootstrap for provided.al2023 on arm64
lambdas:
	for f in $(FUNCTIONS); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
	    -o $(BIN)/lambda/$$f/bootstrap ./functions/$$f; \
	done

node_modules/.package-lock.json: package-lock.json
	npm ci

## synth: the stack's template with cdk-nag AwsSolutions (exit 1 on an unsuppressed error)
synth: lambdas node_modules/.package-lock.json
	$(CDK) synth -q $(CDK_CONTEXT)

## deploy: cdk deploy (REPOSITORY=https://... required; CDK_ARGS="-c maxWorkers=50 ...")
deploy: lambdas node_modules/.package-lock.json
	@test -n "$(REPOSITORY)" || { echo "make deploy needs REPOSITORY=https://..." >&2; exit 2; }
	$(CDK) deploy $(CDK_CONTEXT)

standins-start:
	scripts/standins.sh start

standins-stop:
	scripts/standins.sh stop

clean:
	rm -rf $(BIN) bench.out
