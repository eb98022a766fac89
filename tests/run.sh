#!/usr/bin/env bash
# make test's three test sessions, side by side (the Makefile passes their settings):
#   1. every test on the compiled build, on TEST_WORKERS pytest-xdist workers;
#   2. Disque's compatibility tests once more with flow to disk at its most (FLOW_ARGS);
#   3. the unit and simulator tests on the pure build (DISQUETTE_PURE=1).
# Sessions 2 and 3 start with the first and fill the cores its waits leave idle; each
# has its own part of the test ports (DISQUETTE_TEST_PORTS, tests/support/ports.py).
# The third (a virtual clock, nothing timed) runs niced, so that it yields the CPU to
# the sessions whose tests wait on real timers (Spark gives a Python worker 10 s to
# connect back, and a loaded run missed that).
# Their output goes to .test-logs/ and is shown after the first session's: the summary
# line, or the whole log if the session failed. The exit status is 1 if any failed.
# The first session's JUnit report (.test-logs/main.xml) refreshes tests/slowest.txt
# (tests/support/slowest.py) and shows where its CPU went (tests/support/cpu.py,
# printed after its slowest 20); the other two print their CPU in all.
set -u
py=$1 workers=$2 flow_args=$3 flow_tests=$4 pure_seeds=$5
shift 5
logs=.test-logs
mkdir -p "$logs"
env DISQUETTE_TEST_PORTS=17200-18100 DISQUETTE_TEST_SERVER_ARGS="$flow_args" \
  "$py" -m pytest -q -p no:cacheprovider --junitxml="$logs/flow.xml" $flow_tests \
  >"$logs/flow.log" 2>&1 &
flow=$!
nice -n 10 env DISQUETTE_TEST_PORTS=18100-19000 DISQUETTE_PURE=1 $pure_seeds \
  "$py" -m pytest -q -p no:cacheprovider --junitxml="$logs/pure.xml" tests/unit tests/sim \
  >"$logs/pure.log" 2>&1 &
pure=$!
DISQUETTE_TEST_PORTS=10000-17200 "$py" -m pytest -q -n "$workers" --dist loadscope \
  --durations=20 --junitxml="$logs/main.xml" "$@"
status=$?
echo "--- CPU of the compiled run, where it went (tests/support/cpu.py):"
"$py" -m tests.support.cpu "$logs/main.xml"
for run in flow:$flow pure:$pure; do
  name=${run%%:*}
  if wait "${run##*:}"; then
    echo "--- $name run: $(tail -n 1 "$logs/$name.log")"
    test -f "$logs/$name.xml" && "$py" -m tests.support.cpu "$logs/$name.xml" 0
  else
    status=1
    echo "--- $name run FAILED ($logs/$name.log):"
    cat "$logs/$name.log"
  fi
done
exit $status
