"""The web console in a real browser: Debian's chromium, headless, driven through chromedriver
(selenium), against real quarry processes (one node, then a 4-node cluster with a node stopped).

Screenshots of every page go to target/console-screenshots/ (a test artifact: look at them).
A missing chromium or chromedriver skips these tests, unless QUARRY_REQUIRE_CLIENTS=1 (scripts/test
installs them), where it fails them.
"""

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import boto3
import pytest
from botocore.config import Config

from conftest import ACCESS_KEY, REPO, SECRET_KEY, free_port, quarry_bin

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the venv has it (tests/python/requirements.txt)
    webdriver = None

SHOTS = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "console-screenshots"
WAIT = 30


def _need(path_or_name):
    found = shutil.which(path_or_name)
    if found:
        return found
    if os.environ.get("QUARRY_REQUIRE_CLIENTS") == "1":
        pytest.fail(f"{path_or_name} is not installed (scripts/test installs chromium and chromium-driver)")
    pytest.skip(f"{path_or_name} is not installed")


class Node:
    """One quarry process with its console on its own port."""

    def __init__(self, root, drives, port, console_port, extra_env=None):
        self.port, self.console_port = port, console_port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.console = f"http://127.0.0.1:{console_port}"
        self.log_path = root / f"node-{port}.log"
        env = dict(os.environ)
        env.update(
            QUARRY_ROOT_USER=ACCESS_KEY,
            QUARRY_ROOT_PASSWORD=SECRET_KEY,
            HOME=str(root),
            RUST_LOG=env.get("RUST_LOG", "info"),
            QUARRY_CLUSTER_SECRET="console-test-cluster-secret-0123456789",
        )
        env.pop("QUARRY_CERTS_DIR", None)
        env.update(extra_env or {})
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(quarry_bin()), "server", *drives, "--address", f"127.0.0.1:{port}",
             "--console-address", f"127.0.0.1:{console_port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=root, env=env,
        )

    def wait_live(self, timeout=40):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"quarry exited:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.console}/", timeout=1) as r:
                    if r.status == 200:
                        with urllib.request.urlopen(f"{self.endpoint}/health/ready", timeout=1) as r2:
                            if r2.status == 200:
                                return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"quarry not ready:\n{self.log_path.read_text(errors='replace')[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()

    def client(self):
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )


@pytest.fixture(scope="module")
def browser():
    if webdriver is None:
        if os.environ.get("QUARRY_REQUIRE_CLIENTS") == "1":
            pytest.fail("selenium is not installed (tests/python/requirements.txt)")
        pytest.skip("selenium is not installed")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a browser or driver
    chromium = _need("chromium")
    driver_path = _need("chromedriver")
    SHOTS.mkdir(parents=True, exist_ok=True)
    downloads = tempfile.TemporaryDirectory(prefix="quarry-console-dl-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,800", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {
        "download.default_directory": downloads.name,
        "download.prompt_for_download": False,
    })
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path), options=opts)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads.name})
    driver.downloads = pathlib.Path(downloads.name)
    viewport(driver, 1280, 800)
    try:
        yield driver
    finally:
        driver.quit()
        downloads.cleanup()


def viewport(driver, width, height, mobile=False):
    """The page's viewport exactly (a window size would include the browser's own frame)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


def shot(driver, name):
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def wait(driver, cond, timeout=WAIT):
    # The console redraws its panels as new samples arrive: an element found a moment ago may be
    # replaced before its text is read. That is a reason to look again, not a failure (a CI run
    # failed test_console_cluster_shows_a_stopped_node_offline on it).
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(cond)


def css(driver, selector, timeout=WAIT):
    return wait(driver, EC.visibility_of_element_located((By.CSS_SELECTOR, selector)), timeout)


def sign_in(driver, console, secret, access_key=ACCESS_KEY):
    driver.get(console + "/")
    css(driver, "#access-key")
    # Keyboard only: the access key field has the focus; Tab to the secret, Enter submits.
    active = driver.switch_to.active_element
    assert active.get_attribute("id") == "access-key"
    active.send_keys(access_key, Keys.TAB)
    driver.switch_to.active_element.send_keys(secret, Keys.ENTER)


@pytest.fixture(scope="module")
def single():
    tmp = tempfile.TemporaryDirectory(prefix="quarry-console-")
    root = pathlib.Path(tmp.name)
    drives = [str(root / f"d{i}") for i in range(1, 5)]
    for d in drives:
        os.makedirs(d)
    # A key service with one key, for the bucket default encryption the console sets.
    kms = {"QUARRY_KMS_SECRET_KEY": "console-key:MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE="}
    node = Node(root, drives, free_port(), free_port(), extra_env=kms)
    try:
        node.wait_live()
        yield node
    finally:
        node.stop()
        tmp.cleanup()


def test_console_objects(browser, single):
    d = browser
    client = single.client()

    # Wrong keys: refused with the server's message, no session.
    sign_in(d, single.console, "not-the-secret-key")
    err = css(d, ".login .error")
    assert "wrong" in err.text, err.text
    shot(d, "01-sign-in-refused")
    assert not any(c["name"] == "quarry_console" for c in d.get_cookies())

    # Right keys.
    sign_in(d, single.console, SECRET_KEY)
    css(d, "#new-bucket")
    cookie = next(c for c in d.get_cookies() if c["name"] == "quarry_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert SECRET_KEY not in d.execute_script("return document.documentElement.outerHTML + JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + document.cookie")

    # Create a bucket (with versioning).
    bucket = f"console-{uuid.uuid4().hex[:10]}"
    d.find_element(By.ID, "new-bucket").send_keys(bucket)
    d.find_element(By.ID, "new-versioning").click()
    d.find_element(By.ID, "create-bucket").click()
    css(d, f'tr[data-bucket="{bucket}"]')
    assert client.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    wait(d, lambda d: "…" not in d.find_element(By.CSS_SELECTOR, f'tr[data-bucket="{bucket}"]').text)
    shot(d, "02-buckets")

    # Upload a small file and a 20 MiB one (multipart) through the file picker.
    d.find_element(By.CSS_SELECTOR, f'tr[data-bucket="{bucket}"] a').click()
    css(d, "#drop-zone")
    work = pathlib.Path(tempfile.mkdtemp(prefix="quarry-console-files-"))
    small = work / "hello.txt"
    small.write_bytes(b"hello from the console\n" * 10)
    big = work / "big.bin"
    big.write_bytes(os.urandom(20 * 1024 * 1024))
    d.find_element(By.ID, "file-input").send_keys(f"{small}\n{big}")
    for name in ("hello.txt", "big.bin"):
        li = wait(d, EC.presence_of_element_located((By.CSS_SELECTOR, f'#uploads li[data-key="{name}"]')))
        wait(d, lambda d: li.get_attribute("data-state") in ("done", "failed"), timeout=120)
        assert li.get_attribute("data-state") == "done", li.text
        assert li.find_element(By.CSS_SELECTOR, ".pct").text == "100%"
    shot(d, "03-uploaded")
    head = client.head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == 20 * 1024 * 1024
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # three 8 MiB parts
    got = client.get_object(Bucket=bucket, Key="big.bin")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(big.read_bytes()).digest()
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    # A part that keeps failing (the browser blocks it) stops the upload with Resume; once the
    # network is back, Resume sends the missing part only and completes the same upload.
    resumable = work / "resume.bin"
    resumable.write_bytes(os.urandom(17 * 1024 * 1024))
    d.execute_cdp_cmd("Network.enable", {})
    d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*partNumber=2&*"]})
    d.find_element(By.ID, "file-input").send_keys(str(resumable))
    li = wait(d, EC.presence_of_element_located((By.CSS_SELECTOR, '#uploads li[data-key="resume.bin"]')))
    wait(d, lambda d: li.get_attribute("data-state") == "failed", timeout=60)
    assert "part 2" in li.text, li.text
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["Key"] for u in uploads] == ["resume.bin"], uploads
    parts = client.list_parts(Bucket=bucket, Key="resume.bin", UploadId=uploads[0]["UploadId"])["Parts"]
    assert sorted(p["PartNumber"] for p in parts) == [1, 3], parts
    shot(d, "03b-upload-failed")
    d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    li.find_element(By.XPATH, ".//button[text()='Resume']").click()
    wait(d, lambda d: li.get_attribute("data-state") == "done", timeout=60)
    assert li.find_element(By.CSS_SELECTOR, ".pct").text == "100%"
    got = client.get_object(Bucket=bucket, Key="resume.bin")["Body"].read()
    assert got == resumable.read_bytes()
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    client.delete_object(Bucket=bucket, Key="resume.bin")

    # Browse into a prefix.
    client.put_object(Bucket=bucket, Key="docs/guide/readme.txt", Body=b"read me\n")
    d.find_element(By.XPATH, "//button[text()='Refresh']").click()
    css(d, 'tr[data-prefix="docs/"] a').click()
    css(d, 'tr[data-prefix="docs/guide/"] a').click()
    row = css(d, 'tr[data-key="docs/guide/readme.txt"]')
    assert "docs / guide" in d.find_element(By.CSS_SELECTOR, "nav.crumbs").text.replace("\n", " ")
    shot(d, "04-prefix")

    # Download and compare bytes.
    row.find_element(By.XPATH, ".//button[text()='Download']").click()
    target = d.downloads / "readme.txt"
    wait(d, lambda _: target.exists() and target.read_bytes() == b"read me\n")

    # Object details, then a share link fetched without credentials.
    row.find_element(By.CSS_SELECTOR, "td.name a").click()
    details = css(d, "#object-details")
    assert "8 bytes" in details.text and "ETag" in details.text, details.text
    shot(d, "05-details")
    d.find_element(By.ID, "share").click()
    css(d, "#share-make").click()
    url = wait(d, lambda d: d.find_element(By.ID, "share-url").get_attribute("value"))
    assert url.startswith(single.endpoint + "/"), url
    shot(d, "06-share")
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == b"read me\n"
    d.find_element(By.XPATH, "//dialog//button[text()='Close']").click()

    # Multi-select delete at the bucket's top.
    d.get(f"{single.console}/#/b/{bucket}/")
    css(d, 'input[data-key="hello.txt"]').click()
    d.find_element(By.CSS_SELECTOR, 'input[data-key="big.bin"]').click()
    d.find_element(By.ID, "delete-selected").click()
    wait(d, EC.alert_is_present()).accept()
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, 'tr[data-key="big.bin"]'))
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["docs/guide/readme.txt"], keys

    # A server error is shown as the server said it: the bucket is not empty.
    d.get(f"{single.console}/#/buckets")
    css(d, f'tr[data-bucket="{bucket}"] button').click()
    wait(d, EC.alert_is_present()).accept()
    err = css(d, "main .error")
    assert "BucketNotEmpty" in err.text, err.text
    shot(d, "07-error")

    # Phone width, and dark mode.
    viewport(d, 390, 844, mobile=True)
    d.get(f"{single.console}/#/b/{bucket}/")
    css(d, "#drop-zone")
    shot(d, "08-phone")
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    viewport(d, 1280, 800)
    d.get(f"{single.console}/#/buckets")
    css(d, f'tr[data-bucket="{bucket}"]')
    shot(d, "09-dark")
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    # Sign out: the session is gone on the server too.
    d.find_element(By.ID, "signout").click()
    css(d, "#access-key")
    d.get(f"{single.console}/api/s3/")
    assert "SessionExpired" in d.page_source
    shutil.rmtree(work, ignore_errors=True)


def test_console_identity(browser, single):
    """Users, keys, policies and groups made in the console are real IAM state: the new user's
    keys sign S3 calls exactly as the attached policy allows; the console itself refuses that
    user the identity pages with the server's AccessDenied."""
    d = browser
    sign_in(d, single.console, SECRET_KEY)
    css(d, "#new-bucket")
    bucket = f"ident-{uuid.uuid4().hex[:10]}"
    single.client().create_bucket(Bucket=bucket)
    single.client().put_object(Bucket=bucket, Key="k", Body=b"visible")

    # A user, from the Identity tab.
    d.find_element(By.ID, "nav-identity").click()
    user = f"cu-{uuid.uuid4().hex[:8]}"
    css(d, "#new-user").send_keys(user)
    d.find_element(By.ID, "new-user-submit").click()
    css(d, "#user-details")
    assert f":user/{user}" in d.find_element(By.ID, "user-details").text
    # Its access key: the secret is shown once.
    d.find_element(By.ID, "create-key").click()
    key_id = css(d, "#new-key-id").text
    secret = d.find_element(By.ID, "new-key-secret").text
    assert key_id and len(secret) >= 20, (key_id, secret)
    shot(d, "20-identity-new-key")
    d.find_element(By.XPATH, "//dialog//button[text()='I have saved it']").click()
    css(d, f'tr[data-key="{key_id}"]')

    # A policy: text that is not JSON is refused before it is sent; JSON the server finds
    # malformed is refused with the server's words; a good one is created.
    d.get(f"{single.console}/#/policies")
    policy = f"cp-{uuid.uuid4().hex[:8]}"
    css(d, "#new-policy").send_keys(policy)
    editor = d.find_element(By.ID, "new-policy-doc")
    editor.clear()
    editor.send_keys("{ not json")
    d.find_element(By.ID, "create-policy").click()
    err = css(d, "main .error")
    assert "not JSON" in err.text, err.text
    editor.clear()
    editor.send_keys('{"Version": "2012-10-17", "Statement": [{"Effect": "Maybe", "Action": "s3:GetObject", "Resource": "*"}]}')
    d.find_element(By.ID, "create-policy").click()
    wait(d, lambda d: "MalformedPolicy" in d.find_element(By.CSS_SELECTOR, "main .error").text)
    editor.clear()
    doc = ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:ListAllMyBuckets"], "Resource": "*"}, '
           f'{{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::{bucket}/*"}}]}}')
    editor.send_keys(doc)
    d.find_element(By.ID, "create-policy").click()
    text = css(d, "#policy-document").text
    assert f"arn:aws:s3:::{bucket}/*" in text and "s3:GetObject" in text, text
    shot(d, "21-identity-policy")

    # Attached to the user from its page.
    d.get(f"{single.console}/#/users/{user}")
    select = css(d, "#attach-policy")
    select.find_element(By.CSS_SELECTOR, f'option[value="{policy}"]').click()
    d.find_element(By.ID, "attach-policy-add").click()
    css(d, f'tr[data-policy="{policy}"]')
    # A group, with the user in it.
    d.get(f"{single.console}/#/groups")
    group = f"cg-{uuid.uuid4().hex[:8]}"
    css(d, "#new-group").send_keys(group)
    d.find_element(By.ID, "new-group-submit").click()
    select = css(d, "#add-member")
    select.find_element(By.CSS_SELECTOR, f'option[value="{user}"]').click()
    d.find_element(By.ID, "add-member-add").click()
    css(d, f'tr[data-user="{user}"]')
    d.get(f"{single.console}/#/users/{user}")
    css(d, f'tr[data-group="{group}"]')
    shot(d, "22-identity-user")

    # The keys made in the console sign S3 calls as the policy says (the server may take a moment
    # to see a new key on every node; one node here).
    c = boto3.client(
        "s3", endpoint_url=single.endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"visible"
    with pytest.raises(Exception) as refused:
        c.put_object(Bucket=bucket, Key="k2", Body=b"no")
    assert "AccessDenied" in str(refused.value), refused.value

    # Signed in as that user, the console shows the buckets it may list and refuses the
    # identity pages with the server's answer.
    d.find_element(By.ID, "signout").click()
    sign_in(d, single.console, secret, access_key=key_id)
    css(d, f'tr[data-bucket="{bucket}"]')
    d.get(f"{single.console}/#/users")
    err = css(d, "main .error")
    assert "AccessDenied" in err.text, err.text
    shot(d, "23-identity-refused")
    d.find_element(By.ID, "signout").click()
    css(d, "#access-key")


def test_console_bucket_settings_tags_and_service_accounts(browser, single):
    """A bucket made with object lock and default encryption is made so; the settings card says
    so and shows the server's refusal to suspend its versioning; tags written in the console are
    the object's tags; a service account made in the console signs as its user until deleted."""
    d = browser
    client = single.client()
    sign_in(d, single.console, SECRET_KEY)
    bucket = f"locked-{uuid.uuid4().hex[:10]}"
    css(d, "#new-bucket").send_keys(bucket)
    d.find_element(By.ID, "new-lock").click()
    assert d.find_element(By.ID, "new-versioning").is_selected()  # object lock needs versioning
    d.find_element(By.CSS_SELECTOR, '#new-encryption option[value="aws:kms"]').click()
    css(d, "#new-kms-key").send_keys("console-key")
    d.find_element(By.ID, "create-bucket").click()
    css(d, f'tr[data-bucket="{bucket}"]')
    assert client.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled"
    assert client.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    rule = client.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "console-key"}

    # A bad KMS key id: the bucket is made, the refused setting is reported as the server said.
    other = f"nokey-{uuid.uuid4().hex[:10]}"
    d.find_element(By.ID, "new-bucket").send_keys(other)
    assert not d.find_element(By.ID, "new-lock").is_selected()  # the form starts afresh
    d.find_element(By.CSS_SELECTOR, '#new-encryption option[value="aws:kms"]').click()
    css(d, "#new-kms-key").send_keys("no-such-key")
    d.find_element(By.ID, "create-bucket").click()
    err = wait(d, lambda d: d.find_element(By.CSS_SELECTOR, "main .error").text or False)
    assert "was created, but a setting was refused" in err, err
    client.head_bucket(Bucket=other)
    with pytest.raises(Exception) as none:
        client.get_bucket_encryption(Bucket=other)
    assert "ServerSideEncryptionConfigurationNotFoundError" in str(none.value), none.value
    client.delete_bucket(Bucket=other)

    # The bucket's settings card, and the server's refusal to suspend versioning under a lock.
    client.put_object(Bucket=bucket, Key="doc.txt", Body=b"locked and encrypted\n")
    d.get(f"{single.console}/#/b/{bucket}/")
    assert css(d, "#setting-versioning").text.startswith("Enabled")
    assert css(d, "#setting-lock").text.startswith("On")
    assert "SSE-KMS with key console-key" in css(d, "#setting-encryption").text
    d.find_element(By.ID, "toggle-versioning").click()
    err = wait(d, lambda d: d.find_element(By.CSS_SELECTOR, "#bucket-settings .error").text or False)
    assert "InvalidBucketState" in err, err
    assert client.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    shot(d, "12-bucket-settings")

    # Tags: written in the console, read back by boto3; a malformed line is refused before sending.
    d.get(f"{single.console}/#/o/{bucket}/doc.txt")
    details = css(d, "#object-details")
    assert "SSE-KMS, key console-key" in details.text, details.text
    tags = css(d, "#tags")
    tags.send_keys("novalue")
    d.find_element(By.ID, "save-tags").click()
    err = wait(d, lambda d: d.find_element(By.CSS_SELECTOR, "#object-tags .error").text or False)
    assert "key=value" in err, err
    assert client.get_object_tagging(Bucket=bucket, Key="doc.txt")["TagSet"] == []
    tags.clear()
    tags.send_keys("team=blue\nstage=test & <more>")
    d.find_element(By.ID, "save-tags").click()
    wait(d, lambda _: len(client.get_object_tagging(Bucket=bucket, Key="doc.txt")["TagSet"]) == 2)
    got = {t["Key"]: t["Value"] for t in client.get_object_tagging(Bucket=bucket, Key="doc.txt")["TagSet"]}
    assert got == {"team": "blue", "stage": "test & <more>"}, got
    d.refresh()
    wait(d, lambda d: "team=blue" in d.find_element(By.ID, "tags").get_attribute("value"))
    d.execute_script("document.getElementById('object-tags').scrollIntoView()")
    shot(d, "13-object-tags")

    # A service account of a new user, made on the user's page: its keys sign as the user (who
    # may do nothing yet: AccessDenied, not an unknown key), and stop working once it is deleted.
    user = f"sa-{uuid.uuid4().hex[:8]}"
    d.get(f"{single.console}/#/users")
    css(d, "#new-user").send_keys(user)
    d.find_element(By.ID, "new-user-submit").click()
    css(d, "#service-accounts summary").click()
    css(d, "#sa-name").send_keys("backups")
    d.find_element(By.ID, "sa-create").click()
    ak = css(d, "#new-key-id").text
    sk = d.find_element(By.ID, "new-key-secret").text
    d.find_element(By.XPATH, "//dialog//button[text()='I have saved it']").click()
    row = css(d, f'tr[data-account="{ak}"]')
    assert "backups" in row.text and "active" in row.text, row.text
    d.execute_script("document.getElementById('service-accounts').scrollIntoView()")
    shot(d, "24-identity-service-account")
    sa = boto3.client(
        "s3", endpoint_url=single.endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    with pytest.raises(Exception) as denied:
        sa.list_objects_v2(Bucket=bucket)
    assert "AccessDenied" in str(denied.value), denied.value
    # (Toasts let clicks through: the "created" one sits over this button at 1280x800.)
    row.find_element(By.XPATH, ".//button[text()='Delete']").click()
    wait(d, EC.alert_is_present()).accept()
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-account="{ak}"]'))
    with pytest.raises(Exception) as gone:
        sa.list_objects_v2(Bucket=bucket)
    assert "InvalidAccessKeyId" in str(gone.value), gone.value
    css(d, "#delete-user").click()
    wait(d, EC.alert_is_present()).accept()
    css(d, "#new-user")


def test_console_cluster_shows_a_stopped_node_offline(browser):
    tmp = tempfile.TemporaryDirectory(prefix="quarry-console-cluster-")
    root = pathlib.Path(tmp.name)
    ports = [free_port() for _ in range(4)]
    drives = []
    for i, p in enumerate(ports):
        path = root / f"n{i}" / "d1"
        path.mkdir(parents=True)
        drives.append(f"http://127.0.0.1:{p}{path}")
    nodes = [Node(root, drives, p, free_port()) for p in ports]
    try:
        for n in nodes:
            n.wait_live(timeout=60)
        nodes[3].stop()
        d = browser
        sign_in(d, nodes[0].console, SECRET_KEY)
        css(d, "#new-bucket")
        d.get(nodes[0].console + "/#/cluster")
        stopped = f"127.0.0.1:{ports[3]}"
        wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'#nodes tr[data-node="{stopped}"][data-online="false"]'), timeout=60)
        assert "offline" in d.find_element(By.CSS_SELECTOR, f'#nodes tr[data-node="{stopped}"]').text
        for p in ports[:3]:
            assert d.find_elements(By.CSS_SELECTOR, f'#nodes tr[data-node="127.0.0.1:{p}"][data-online="true"]')
        assert "3 / 4" in css(d, "#stat-nodes").text
        # Traffic for the charts, then two samples at least.
        c = nodes[0].client()
        c.create_bucket(Bucket="charts")
        for i in range(20):
            c.put_object(Bucket="charts", Key=f"k{i}", Body=os.urandom(64 * 1024))
            c.get_object(Bucket="charts", Key=f"k{i}")["Body"].read()
        wait(d, lambda d: "Collecting samples" not in d.find_element(By.ID, "charts").text, timeout=30)
        # The writes missed the stopped node's drive: their heals wait for it, listed by object.
        wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, '#heal-queue tr[data-state="retry"][data-heal^="charts/k"]'), timeout=30)
        assert "waiting for a drive" in d.find_element(By.ID, "heal-queue").text
        d.execute_script("window.scrollTo(0, 0)")
        shot(d, "10-cluster")
        d.execute_script("document.getElementById('heal').scrollIntoView()")
        shot(d, "10b-cluster-heal-queue")
        d.execute_script("document.getElementById('charts').scrollIntoView()")
        shot(d, "11-cluster-charts")
    finally:
        for n in nodes:
            n.stop()
        tmp.cleanup()
