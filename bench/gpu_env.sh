# Source on a GPU machine (repo root): installs the carried wheels (bench/gpu_wheels.sh; the folder $KB_WHEELS,
# .whl by default, its wheels.tar.xz unpacked first where `gpu_wheels.sh tests` packed them) into /tmp/site.
KB_WHEEL_DIR=${KB_WHEELS:-.whl}
if [ -f "$KB_WHEEL_DIR/wheels.tar.xz" ]; then
  mkdir -p /tmp/kb-wheels && tar -xJf "$KB_WHEEL_DIR/wheels.tar.xz" -C /tmp/kb-wheels && KB_WHEEL_DIR=/tmp/kb-wheels
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $KB_WHEEL_DIR/*.whl \
  || { echo "installing ${KB_WHEELS:-.whl}/*.whl failed: run bench/gpu_wheels.sh on the machine with registry access"; return 1; }
export PYTHONPATH=/tmp/site:$PWD/lib${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# data files of the wheels (nbconvert's templates, the widget and plotly extensions) land under /tmp/site/share
export JUPYTER_PATH=/tmp/site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH} PATH=/tmp/site/bin:$PATH
python3 -c "from kernelbook.load.ncu import reader_origin; print('ncu_report reader:', reader_origin())"
# the .debs carried beside the wheels (apt-get download libdw1 libelf1 into .debs/): the libraries nsys's report
# importer needs, which the lent GPU machines' image lacks (capture.nsys.nsys_works names them)
if ls .debs/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/kb-debs && for f in .debs/*.deb; do dpkg -x "$f" /tmp/kb-debs; done
  export LD_LIBRARY_PATH=/tmp/kb-debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
