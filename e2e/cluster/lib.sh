# shellcheck shell=bash
# Shared by up.sh, down.sh and node.sh: stopping what a pid file names, and the owners' watchdog
# that stops a test cluster once the last test process using it has exited.

# The cache folder (built binaries, cluster state, logs): WARMPATH_E2E_CACHE, else e2e/.cache
# beside these scripts in HERE; created, printed as an absolute path.
e2e_cache() { # here
  local c="${WARMPATH_E2E_CACHE:-$1/../.cache}"
  mkdir -p "$c" && (cd "$c" && pwd)
}

# Reports how long a phase took (since START, in epoch seconds) on stderr and, when
# WARMPATH_PHASES names a file (with-cluster.sh sets it), there too, for the run's closing summary.
phase() { # name start
  local line
  line="$(printf '%-44s %5ss' "$1" "$(( $(date +%s) - $2 ))")"
  echo "phase: $line" >&2
  if [ -n "${WARMPATH_PHASES:-}" ]; then echo "$line" >>"$WARMPATH_PHASES" 2>/dev/null || true; fi
}

# Stops the process whose pid RUN/NAME.pid holds, if its command line still contains PATTERN
# (pids get reused): TERM, up to TENTHS tenths of a second (default 50), then KILL. Removes the
# pid file.
stop_pidfile() { # run name pattern [tenths]
  local pidfile="$1/$2.pid" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null && grep -qa -- "$3" "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 "${4:-50}"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# Whether a process listed in RUN/owners (the clusters' users) is alive, EXCEPT one pid if given.
owners_alive() { # run [except]
  local pid
  while read -r pid; do
    [ "$pid" != "${2:-}" ] && kill -0 "$pid" 2>/dev/null && return 0
  done <"$1/owners"
  return 1
}

# Starts, as NAME, the watchdog that runs STOP... once no pid listed in RUN/owners is alive. It
# takes LOCK (on fd 8, held while STOP runs) before the last check, so that an owner joining at
# that moment is not left without a cluster. Its pid goes to RUN/watchdog.pid, its output to LOG.
start_watchdog() { # run lock log name stop...
  local run=$1 lock=$2 log=$3 name=$4
  shift 4
  # shellcheck disable=SC2016 # expanded by the watchdog's own shell
  setsid bash -c "$(declare -f owners_alive)"'
    run="$1"; lock="$2"; shift 2
    while :; do
      sleep 1
      owners_alive "$run" 2>/dev/null && continue
      exec 8>"$lock"; flock 8
      if ! owners_alive "$run" 2>/dev/null; then "$@"; exit 0; fi
      flock -u 8
    done' "$name" "$run" "$lock" "$@" </dev/null >>"$log" 2>&1 8>&- &
  echo $! >"$run/watchdog.pid"
}

# A free loopback TCP port that is none of TAKEN (the kernel may hand out the same free port
# twice before anything binds it). Asks the kernel through python3; without it, probes random
# high ports.
free_port() { # [taken...]
  local p
  while :; do
    if command -v python3 >/dev/null; then
      p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
    else
      p=$(( 20000 + RANDOM % 30000 ))
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
    fi
    case " $* " in *" $p "*) continue ;; esac
    echo "$p"
    return
  done
}

# In DIR: a CA named CA_CN (ca.crt, ca.key), the key pair that signs and verifies
# service-account tokens (TokenRequest API; sa.key, sa.pub), and the admin's static token
# (admin.token) in group system:masters (tokens.csv, the API server's --token-auth-file).
new_pki() { # dir ca-cn
  local dir=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout "$dir/ca.key" -out "$dir/ca.crt" \
    -subj "/CN=$2" >/dev/null 2>&1 &&
    openssl genrsa -out "$dir/sa.key" 2048 >/dev/null 2>&1 &&
    openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" >/dev/null 2>&1 &&
    openssl rand -hex 24 >"$dir/admin.token" &&
    printf '%s,warmpath-e2e-admin,warmpath-e2e-admin,"system:masters"\n' "$(cat "$dir/admin.token")" \
      >"$dir/tokens.csv" &&
    chmod 600 "$dir/ca.key" "$dir/sa.key" "$dir/admin.token" "$dir/tokens.csv"
}

# NAME.crt and NAME.key in DIR, for SUBJECT, signed by DIR's CA with the given extension lines
# (e.g. "subjectAltName=IP:127.0.0.1" "extendedKeyUsage=serverAuth").
sign_cert() { # dir name subject extension...
  local dir=$1 name=$2 subject=$3
  shift 3
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "$subject" >/dev/null 2>&1 &&
    printf '%s\n' "$@" >"$dir/$name.ext" &&
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
      -days 3650 -extfile "$dir/$name.ext" -out "$dir/$name.crt" >/dev/null 2>&1 &&
    chmod 600 "$dir/$name.key"
}

# Starts BIN/etcd as member NAME on loopback, its data in RUN/etcd-data, its log and pid file in
# RUN; sets etcd_port (clients) and etcd_peer_port.
start_etcd() { # bin run name
  local bin=$1 run=$2 name=$3
  etcd_port=$(free_port)
  etcd_peer_port=$(free_port "$etcd_port")
  setsid "$bin/etcd" \
    --name "$name" \
    --data-dir "$run/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "$name=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync \
    --log-level warn \
    </dev/null >"$run/etcd.log" 2>&1 8>&- &
  echo $! >"$run/etcd.pid"
}

# The admin kubeconfig FILE for the API server at SERVER (https://host:port) whose certificate
# PKI's CA signed: user warmpath-e2e-admin with PKI's admin token, cluster and context NAME.
write_kubeconfig() { # file name server pki
  local file=$1 name=$2 server=$3 pki=$4
  cat >"$file" <<EOC
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: warmpath-e2e-admin
  user:
    token: $(cat "$pki/admin.token")
contexts:
- name: $name
  context:
    cluster: $name
    user: warmpath-e2e-admin
current-context: $name
EOC
  chmod 600 "$file"
}
