# The PostgreSQL majors snowflake_id is built and tested on, read by
# setup.sh, test.sh and package.sh. 15 is Debian 12's own, and required:
# without it nothing is tested. The others are built from Debian's source
# packages by postgres-builds.sh (14 and 16 have none there; 13 is
# end-of-life but cheap to keep); each is tested where its source can be
# had, and a run that could not have one says so (SNOWFLAKE_REQUIRED_MAJORS
# makes that a failure instead).
SYSTEM_MAJOR=15
OTHER_MAJORS="${SNOWFLAKE_OTHER_MAJORS-13 17 18}"
# Those of OTHER_MAJORS this machine has builds of (test.sh sets it after
# setup; by default all of them).
AVAILABLE_MAJORS="${SNOWFLAKE_AVAILABLE_MAJORS-$OTHER_MAJORS}"
PG_CACHE="${SNOWFLAKE_PG_CACHE:-/var/cache/snowflake_id/postgres}"
