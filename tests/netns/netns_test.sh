#!/bin/bash
# netns_test.sh DPL TRANSPORTS - `dpl train` across two hosts, emulated by
# two network namespaces joined by a veth pair (10.77.0.1/24 and
# 10.77.0.2/24). Even ranks run in the first namespace, odd ranks in the
# second; rank 0's rendezvous (DPL_ROOT) is on 10.77.0.1. For every
# transport in TRANSPORTS (comma-separated, of ucx and ofi) and every
# layout, the weights digest must equal the threaded run's in the current
# namespace. UCX runs over tcp on the veth (UCX_TLS=tcp,
# UCX_NET_DEVICES=<veth>), libfabric over tcp;ofi_rxm (FI_TCP_IFACE=<veth>).
# Exit 0 passed, 1 failed, 77 skipped (the reason on stdout): not root,
# no namespaces or veth here, or no network transport built.
set -u

DPL=${1:?usage: netns_test.sh DPL TRANSPORTS}
TRANSPORTS=${2:-}
TIMEOUT=20
LAYOUTS=("--stages 4" "--stages 2 --replicas 2")
WORLD=4

skip() {
	echo "SKIP: $*"
	exit 77
}

[ -x "$DPL" ] || { echo "FAIL: $DPL is not executable"; exit 1; }
[ -n "$TRANSPORTS" ] || skip "dpl was built without UCX and libfabric"
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip > /dev/null || skip "no ip(8) here"

NS=(dpl-mh0-$$ dpl-mh1-$$)
VETH=(dv0-$$ dv1-$$)
ADDR=(10.77.0.1 10.77.0.2)
TMP=$(mktemp -d /tmp/dpl-netns-XXXXXX)
PIDS=()

cleanup() {
	local p n
	for p in "${PIDS[@]}"; do
		kill -9 "$p" 2> /dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2> /dev/null
	done
	for n in "${NS[@]}"; do
		ip netns pids "$n" 2> /dev/null | xargs -r kill -9
		ip netns del "$n" 2> /dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# Namespaces an earlier run could not remove (it was SIGKILLed).
for n in $(ip netns list 2> /dev/null | awk '/^dpl-mh[01]-[0-9]+/ {print $1}'); do
	kill -0 "${n##*-}" 2> /dev/null && continue
	ip netns pids "$n" 2> /dev/null | xargs -r kill -9
	ip netns del "$n" 2> /dev/null
done
ip netns add "${NS[0]}" 2> "$TMP/err" ||
	skip "cannot create a network namespace: $(cat "$TMP/err")"
ip netns add "${NS[1]}" 2> "$TMP/err" ||
	skip "cannot create a network namespace: $(cat "$TMP/err")"
ip link add "${VETH[0]}" type veth peer name "${VETH[1]}" 2> "$TMP/err" ||
	skip "cannot create a veth pair: $(cat "$TMP/err")"
for i in 0 1; do
	ip link set "${VETH[$i]}" netns "${NS[$i]}" &&
	ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev "${VETH[$i]}" &&
	ip -n "${NS[$i]}" link set "${VETH[$i]}" up &&
	ip -n "${NS[$i]}" link set lo up ||
		{ echo "FAIL: setting up ${NS[$i]}"; exit 1; }
done
if command -v ping > /dev/null; then
	ip netns exec "${NS[0]}" ping -c 1 -W 5 "${ADDR[1]}" > /dev/null 2>&1 ||
		{ echo "FAIL: ${ADDR[0]} cannot reach ${ADDR[1]}"; exit 1; }
fi

tx_bytes() {
	ip netns exec "${NS[0]}" cat "/sys/class/net/${VETH[0]}/statistics/tx_bytes"
}

digest() {
	sed -n 's/.*"weights_digest":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' "$1"
}

fails=0
port=29400
IFS=, read -r -a TLIST <<< "$TRANSPORTS"
for layout in "${LAYOUTS[@]}"; do
	# shellcheck disable=SC2086
	timeout 120 "$DPL" train $layout --iterations 4 --json --check \
		> "$TMP/ref.json" 2> "$TMP/ref.err" ||
		{ echo "FAIL: threaded run of $layout:"; cat "$TMP/ref.err"; exit 1; }
	want=$(digest "$TMP/ref.json")
	for t in "${TLIST[@]}"; do
		port=$((port + 1))
		PIDS=()
		tx0=$(tx_bytes)
		for ((r = 0; r < WORLD; r++)); do
			i=$((r % 2))
			# shellcheck disable=SC2086
			ip netns exec "${NS[$i]}" env \
				DPL_RANK=$r DPL_WORLD_SIZE=$WORLD \
				DPL_ROOT="${ADDR[0]}:$port" \
				UCX_TLS=tcp UCX_NET_DEVICES="${VETH[$i]}" \
				FI_PROVIDER="tcp;ofi_rxm" \
				FI_TCP_IFACE="${VETH[$i]}" \
				timeout 120 "$DPL" train $layout --iterations 4 \
				--json --check --transport "$t" \
				--timeout $TIMEOUT \
				> "$TMP/out.$r" 2> "$TMP/err.$r" &
			PIDS+=($!)
		done
		ok=1
		for ((r = 0; r < WORLD; r++)); do
			wait "${PIDS[$r]}" || { ok=0; echo "rank $r of $t ($layout) exited $?:"; cat "$TMP/err.$r"; }
		done
		PIDS=()
		got=$(digest "$TMP/out.0")
		tx=$(($(tx_bytes) - tx0))
		if [ $tx -lt 65536 ]; then
			echo "FAIL: $t, $layout: only $tx bytes left ${NS[0]} over ${VETH[0]}"
			fails=$((fails + 1))
		fi
		if [ $ok = 1 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
			echo "ok: $t across namespaces, $layout: digest $got ($tx bytes over ${VETH[0]})"
		else
			echo "FAIL: $t across namespaces, $layout: digest '$got', threads give '$want'"
			fails=$((fails + 1))
		fi
		for ((r = 1; r < WORLD; r++)); do
			[ -s "$TMP/out.$r" ] && { echo "FAIL: rank $r printed results"; fails=$((fails + 1)); }
		done
	done
done
[ $fails = 0 ] || exit 1
echo "PASS"
