# The dispatcher's container image: `docker build -t trainjob-dispatcher .`
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["dispatcher"]
CMD ["run", "--config", "/etc/trainjob-dispatcher/config.yaml"]
